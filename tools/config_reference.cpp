#include "tools/config_reference.h"

#include <cmath>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/config_schema.h"
#include "models/block_registry.h"
#include "sampler/diffusion_sampler.h"
#include "objectives/objective.h"

namespace inkstone {
namespace {

// A table cell: '|' would end the cell, a newline the row.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

std::string number(double value) {
  return value == std::floor(value) && std::abs(value) < 1e15 ? fmt::format("{:.0f}", value) : fmt::format("{:g}", value);
}

template <typename Kind>
std::string letters_of(const std::vector<Kind>& kinds) {
  std::vector<std::string> listed;
  for (const auto& kind : kinds) listed.push_back(fmt::format("`{}` {}", kind.letter, kind.description));
  return fmt::format("letters: {}", fmt::join(listed, ", "));
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const auto& name : names) quoted.push_back("`" + name + "`");
  return fmt::format("{}", fmt::join(quoted, ", "));
}

// The keys whose values a registry defines rather than the schema (the schema cannot see the registries), one
// line each.
const std::map<std::string, std::function<std::string()>>& registry_backed_keys() {
  static const std::map<std::string, std::function<std::string()>> keys = {
      {"objective.name", [] { return quoted_list(registered_objective_names()); }},
      {"model.mixer_pattern", [] { return letters_of(token_mixer_kinds()); }},
      {"model.ffn_pattern", [] { return letters_of(feed_forward_kinds()); }},
      {"sample.diffusion_sampler", [] { return quoted_list(diffusion_method_names()); }},
      {"sample.noise_removal", [] { return quoted_list(noise_removal_names()); }},
  };
  return keys;
}

// What a key accepts beyond its type: the registry's names, the schema's choices, or its numeric range.
std::string accepted(const FieldSpec& field) {
  if (const auto it = registry_backed_keys().find(field.name()); it != registry_backed_keys().end())
    return it->second();
  if (!field.choices.empty()) return quoted_list(field.choices);
  if (field.min && field.max)
    return fmt::format("{}{}, {}]", field.min_exclusive ? "(" : "[", number(*field.min), number(*field.max));
  if (field.min) return fmt::format("{} {}", field.min_exclusive ? ">" : "≥", number(*field.min));
  if (field.no_empty_entries) return "non-empty strings";
  return "";
}

}  // namespace

std::string config_reference_markdown() {
  Config defaults = default_config();
  std::string out =
      "# Configuration reference\n\n"
      "Every key of a run's TOML file, written from the schema (`config/config_schema.cpp`) and the registries by\n"
      "`inkstone train --print-reference > docs/config.md`; a test fails when this file and the code differ.\n"
      "`docs/configuration.md` explains how the keys work together.\n";
  for (const auto& section : config_sections()) {
    out += fmt::format("\n## [{}]\n\n| key | type | default | accepts | meaning |\n|---|---|---|---|---|\n", section);
    for (const auto& field : config_schema()) {
      if (field.section != section) continue;
      out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", field.key, field.type_name(),
                         cell(field_to_toml(defaults, field)), cell(accepted(field)), cell(field.doc));
    }
  }
  return out;
}

}  // namespace inkstone
