// TOML -> typed Config: every key is checked against the schema; errors name file:line, key and a near miss.
#include "config/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "config/config_schema.h"
#include "core/errors.h"
#include "core/input_file.h"

namespace inkstone {
namespace {

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 2);  // farther than this is not a typo
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d <= best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

const FieldSpec* find_field(const std::string& section, const std::string& key) {
  for (const auto& f : config_schema())
    if (f.section == section && f.key == key) return &f;
  return nullptr;
}

std::string where(const std::string& origin, const toml::source_region& region) {
  if (region.begin.line == 0) return origin;
  return fmt::format("{}:{}", origin, region.begin.line);
}

std::string value_text(const toml::node& node) {
  std::ostringstream out;
  node.visit([&](auto&& v) { out << v; });
  return out.str();
}

// The index of `text` among the field's allowed values, or an error naming them (and the closest, if any).
size_t choice_index(const FieldSpec& field, const std::string& text, const std::string& location) {
  const auto& c = field.choices;
  const auto found = std::find(c.begin(), c.end(), text);
  if (found != c.end()) return static_cast<size_t>(found - c.begin());
  const std::string hint = suggestion(text, c);
  throw InputError(fmt::format("key '{}' at {} is '{}', must be one of: {}{}", field.name(), location, text,
                               fmt::join(c, ", "), hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint)));
}

// Stores one TOML value into its typed slot, or throws naming where it came from.
void assign(Config& config, const FieldSpec& field, const toml::node& node, const std::string& location) {
  auto wrong_type = [&] {
    return InputError(fmt::format("key '{}' at {} must be {}, got {}", field.name(), location, field.type_name(),
                                  value_text(node)));
  };
  std::visit(
      [&](auto slot) {
        using T = std::remove_pointer_t<decltype(slot)>;
        if constexpr (std::is_same_v<T, ChoiceSlot>) {
          if (!node.is_string()) throw wrong_type();
          slot.set(choice_index(field, node.as_string()->get(), location));
        } else if constexpr (std::is_same_v<T, int64_t>) {
          if (!node.is_integer()) throw wrong_type();
          *slot = node.as_integer()->get();
        } else if constexpr (std::is_same_v<T, double>) {
          if (node.is_integer())
            *slot = static_cast<double>(node.as_integer()->get());
          else if (node.is_floating_point())
            *slot = node.as_floating_point()->get();
          else
            throw wrong_type();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) throw wrong_type();
          *slot = node.as_boolean()->get();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) throw wrong_type();
          *slot = node.as_string()->get();
        } else {
          if (!node.is_array()) throw wrong_type();
          std::vector<std::string> items;
          for (const auto& item : *node.as_array()) {
            if (!item.is_string()) throw wrong_type();
            items.push_back(item.as_string()->get());
          }
          *slot = std::move(items);
        }
      },
      field.slot(config));
  check_field_value(config, field, location);
}

void check_number(const FieldSpec& field, double value, const std::string& location) {
  // NaN passes every comparison below, and an infinity is never a setting: both would fail deep in a run.
  if (!std::isfinite(value))
    throw InputError(fmt::format("key '{}' at {} is {}, must be a finite number", field.name(), location, value));
  const bool below = field.min && (value < *field.min || (field.min_exclusive && value == *field.min));
  if (below || (field.max && value > *field.max)) {
    const char* open = field.min_exclusive ? "(" : "[";
    std::string bounds = field.max ? fmt::format("in {}{}, {}]", open, *field.min, *field.max)
                                   : fmt::format("{} {}", field.min_exclusive ? ">" : ">=", *field.min);
    throw InputError(fmt::format("key '{}' at {} is {}, must be {}", field.name(), location, value, bounds));
  }
}

}  // namespace

void check_field_value(Config& config, const FieldSpec& field, const std::string& location) {
  std::visit(
      [&](auto slot) {
        using T = std::remove_pointer_t<decltype(slot)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          check_number(field, static_cast<double>(*slot), location);
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!field.choices.empty()) choice_index(field, *slot, location);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          for (size_t i = 0; field.no_empty_entries && i < slot->size(); ++i)
            if ((*slot)[i].empty())
              throw InputError(fmt::format("key '{}' at {} has an empty string at position {}, which would match "
                                           "everywhere: remove it",
                                           field.name(), location, i + 1));
        }
      },
      field.slot(config));
}

Config default_config() {
  Config config;
  for (const auto& field : config_schema()) {
    std::visit(
        [&](auto slot) {
          using T = std::remove_pointer_t<decltype(slot)>;
          if constexpr (std::is_same_v<T, ChoiceSlot>)
            slot.set(choice_index(field, std::get<std::string>(field.default_value), "the schema"));
          else
            *slot = std::get<T>(field.default_value);
        },
        field.slot(config));
  }
  return config;
}

std::vector<DataFolder> data_folders(const DataConfig& data) {
  if (data.mixture.empty()) return {{data.path, 1.0, "data.path"}};
  if (!data.path.empty())
    throw InputError(fmt::format("data.path = '{}' and data.mixture both name training data: give one of them",
                                 data.path));
  std::vector<DataFolder> folders;
  for (size_t i = 0; i < data.mixture.size(); ++i) {
    const std::string& entry = data.mixture[i];
    const std::string key = fmt::format("data.mixture[{}]", i);
    const auto eq = entry.rfind('=');
    double weight = 0;
    size_t used = 0;
    try {
      if (eq != std::string::npos && eq > 0) weight = std::stod(entry.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || eq == 0 || used == 0 || used != entry.size() - eq - 1 || !(weight > 0) ||
        !std::isfinite(weight))
      throw InputError(fmt::format("{} = '{}' must be \"folder=weight\" with a positive weight", key, entry));
    folders.push_back({entry.substr(0, eq), weight, key});
  }
  return folders;
}

namespace {

void apply_table(Config& config, const toml::table& root, const std::string& origin) {
  const auto& sections = config_sections();
  for (const auto& [section_key, section_node] : root) {
    std::string section(section_key.str());
    std::string location = where(origin, section_key.source());
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      std::string hint = suggestion(section, sections);
      throw InputError(fmt::format("unknown section [{}] at {}{}", section, location,
                                   hint.empty() ? "" : fmt::format("; did you mean [{}]?", hint)));
    }
    const toml::table* table = section_node.as_table();
    if (!table) throw InputError(fmt::format("'{}' at {} must be a [section] table", section, location));
    for (const auto& [key_node, value] : *table) {
      std::string key(key_node.str());
      std::string key_location = where(origin, key_node.source());
      const FieldSpec* field = find_field(section, key);
      if (!field) {
        std::vector<std::string> keys;
        std::string other_section;
        for (const auto& f : config_schema()) {
          if (f.section == section) keys.push_back(f.key);
          if (f.key == key) other_section = f.section;
        }
        std::string hint = suggestion(key, keys);
        std::string advice = !hint.empty()            ? fmt::format("; did you mean '{}'?", hint)
                             : !other_section.empty() ? fmt::format("; it belongs in [{}]", other_section)
                                                      : std::string();
        throw InputError(
            fmt::format("unknown key '{}' in [{}] at {}{}", key, section, key_location, advice));
      }
      assign(config, *field, value, key_location);
    }
  }
}

// A layer pattern (models/layer_pattern.h): letters (from `allowed` when given; the block patterns' letters are
// the block registry's, models/block_registry.h), spaces ignored, tiled over n_layers.
// Block diffusion draws a noise level per block of whole blocks per window (its objective and token-mixer
// conditions are the objective registry's, objectives/registry.cpp).
void check_block_diffusion(const Config& c) {
  const auto& m = c.model;
  const int64_t block = c.diffusion.block_size;
  if (c.data.seq_len % block != 0)
    throw InputError(fmt::format("diffusion.block_size = {} must divide data.seq_len = {}", block, c.data.seq_len));
  if (m.time_conditioning)
    throw InputError(fmt::format("diffusion.block_size = {} draws a t per block; it needs model.time_conditioning "
                                 "= false",
                                 block));
  if (c.data.document_mask)
    throw InputError(fmt::format("diffusion.block_size = {} does not combine with data.document_mask", block));
  // Checked here, not only when the first text sample is drawn (train's evaluations sample text).
  if (c.sample.approximate_cache || c.sample.noisy_suffix)
    throw InputError(fmt::format("sample.{} = true is for models trained on whole windows; diffusion.block_size = {} "
                                 "trains a block-causal model, which keeps an exact cache and never reads past its "
                                 "block",
                                 c.sample.approximate_cache ? "approximate_cache" : "noisy_suffix", block));
}

void check_layer_pattern(const char* key, const std::string& pattern, const std::string& allowed,
                         int64_t n_layers) {
  int64_t letters = 0;
  for (char ch : pattern) {
    if (ch == ' ') continue;
    if (!allowed.empty() && allowed.find(ch) == std::string::npos)
      throw InputError(fmt::format("model.{} = \"{}\" has '{}'; allowed letters: {}", key, pattern, ch, allowed));
    ++letters;
  }
  if (letters == 0 || n_layers % letters != 0)
    throw InputError(fmt::format("model.{} = \"{}\" has {} letters, which must divide model.n_layers = {}", key,
                                 pattern, letters, n_layers));
}

// Residual routing and variable width (models/residual_routing.h, models/width_profile.h).
void check_residual_and_width(const ModelConfig& m) {
  if (m.residual == ResidualMode::attnres && m.residual_heads != 1)
    throw InputError(fmt::format("model.residual = \"attnres\" has one head, not model.residual_heads = {}; use "
                                 "\"mhar\"", m.residual_heads));
  if (m.residual != ResidualMode::plain && m.d_model % m.residual_heads != 0)
    throw InputError(fmt::format("model.residual_heads = {} must divide model.d_model = {}", m.residual_heads,
                                 m.d_model));
  const bool blocked = m.residual == ResidualMode::block_attnres ||
                       (m.residual == ResidualMode::delta && m.residual_delta == DeltaSources::block);
  if (blocked && m.residual_blocks > m.n_layers)
    throw InputError(fmt::format("model.residual_blocks = {} exceeds model.n_layers = {}", m.residual_blocks,
                                 m.n_layers));
  if (m.width_profile == WidthProfile::uniform) return;
  if (m.residual != ResidualMode::plain)
    throw InputError(fmt::format("model.width_profile = \"{}\" needs model.residual = \"plain\" (routing mixes "
                                 "sources of one width), not \"{}\"",
                                 choice_name(m.width_profile), choice_name(m.residual)));
  if (m.head_dim != 0)
    throw InputError("model.width_profile = \"geometric\" derives each layer's head dim from its width: set "
                     "model.head_dim = 0");
  if (m.n_layers < 2 || m.width_bottleneck_layer == 1 || m.width_bottleneck_layer > m.n_layers)
    throw InputError(fmt::format("model.width_bottleneck_layer = {} must lie in 2..model.n_layers = {}",
                                 m.width_bottleneck_layer, m.n_layers));
}

// Hidden decoding (models/hidden_streams.h).
void check_hidden_streams(const ModelConfig& m) {
  if (m.hidden_streams == 1) return;
  check_layer_pattern("hidden_attention", m.hidden_attention, "LX", m.n_layers);
  if (m.qkv_conv)
    throw InputError(fmt::format("model.qkv_conv with model.hidden_streams = {} is not supported: the conv would mix "
                                 "the streams of stream-local layers", m.hidden_streams));
}

// Rules that involve several keys.
void validate(const Config& c) {
  data_folders(c.data);
  const auto& m = c.model;
  if (m.n_heads % m.n_kv_heads != 0)
    throw InputError(fmt::format("model.n_kv_heads = {} must divide model.n_heads = {}", m.n_kv_heads, m.n_heads));
  if (m.head_dim == 0 && m.d_model % m.n_heads != 0)
    throw InputError(fmt::format("model.d_model = {} is not divisible by model.n_heads = {}; set model.head_dim",
                                 m.d_model, m.n_heads));
  check_layer_pattern("mixer_pattern", m.mixer_pattern, "", m.n_layers);
  check_layer_pattern("ffn_pattern", m.ffn_pattern, "", m.n_layers);
  check_residual_and_width(m);
  check_hidden_streams(m);
  if (m.rope_scaling == RopeScalingKind::llama3 && m.rope_high_freq_factor <= m.rope_low_freq_factor)
    throw InputError(fmt::format("model.rope_high_freq_factor = {} must exceed model.rope_low_freq_factor = {}",
                                 m.rope_high_freq_factor, m.rope_low_freq_factor));
  if (c.train.batch_size % c.train.grad_accum != 0)
    throw InputError(fmt::format("train.grad_accum = {} must divide train.batch_size = {}", c.train.grad_accum,
                                 c.train.batch_size));
  if (c.data.seq_len > m.max_seq_len)
    throw InputError(fmt::format("data.seq_len = {} exceeds model.max_seq_len = {}", c.data.seq_len,
                                 m.max_seq_len));
  if (c.diffusion.time_mix > 0 && m.time_conditioning)
    throw InputError(fmt::format("diffusion.time_mix = {} needs model.time_conditioning = false: a time-conditioned "
                                 "model takes one noise level per sequence",
                                 c.diffusion.time_mix));
  if (c.diffusion.block_size > 0) check_block_diffusion(c);
  if (c.sample.approximate_cache && c.diffusion.shifted_outputs)
    throw InputError("sample.approximate_cache = true runs a block alone, and diffusion.shifted_outputs = true reads "
                     "a block's first token from the position before it; sample without the cache");
  if (c.diffusion.log_snr_min >= c.diffusion.log_snr_max)
    throw InputError(fmt::format("diffusion.log_snr_min = {} must be below diffusion.log_snr_max = {}",
                                 c.diffusion.log_snr_min, c.diffusion.log_snr_max));
  if (c.rl.prompts_per_step % c.rl.mini_batches != 0)
    throw InputError(fmt::format("rl.mini_batches = {} must divide rl.prompts_per_step = {} (a mini-batch holds "
                                 "whole groups)",
                                 c.rl.mini_batches, c.rl.prompts_per_step));
  if (c.grpo.kl_coef > 0 && c.rl.reference != ReferencePolicy::initial)
    throw InputError("grpo.kl_coef > 0 needs rl.reference = \"initial\": the KL to the rollout policy is not a "
                     "penalty");
  if ((c.data.inject_step > 0) != !c.data.inject_text.empty())
    throw InputError("data.inject_text and data.inject_step go together: both set, or neither");
  if (c.data.inject_step > c.train.steps)
    throw InputError(fmt::format("data.inject_step = {} is after the last step (train.steps = {})", c.data.inject_step,
                                 c.train.steps));
  if (c.data.inject_row >= c.train.batch_size)
    throw InputError(fmt::format("data.inject_row = {} is outside a batch of train.batch_size = {} rows",
                                 c.data.inject_row, c.train.batch_size));
  for (const auto& group : c.optim.no_decay) {
    static const std::vector<std::string> groups = {"norm", "bias", "embedding"};
    if (std::find(groups.begin(), groups.end(), group) == groups.end())
      throw InputError(fmt::format("optim.no_decay has '{}', allowed: norm, bias, embedding", group));
  }
}

}  // namespace

void apply_override(Config& config, const std::string& assignment) {
  auto eq = assignment.find('=');
  auto dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw InputError(fmt::format("--set '{}' must look like section.key=value", assignment));
  std::string section = assignment.substr(0, dot);
  std::string key = assignment.substr(dot + 1, eq - dot - 1);
  std::string text = assignment.substr(eq + 1);
  std::string origin = fmt::format("--set {}", assignment);

  // The value is read as TOML, so 3, 3.0, true, "x" and ["a", "b"] mean what they mean in a file;
  // bare words that are not TOML (e.g. cosine) are taken as strings.
  toml::table parsed;
  try {
    parsed = toml::parse(fmt::format("{} = {}", "value", text));
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"value", text}};
  }
  toml::table section_table{{key, *parsed.get("value")}};
  toml::table root{{section, section_table}};
  apply_table(config, root, origin);
}

Config config_from_string(const std::string& toml_text, const std::string& origin,
                          const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}: invalid TOML: {}", origin, e.source().begin.line, e.description()));
  }
  Config config = default_config();
  apply_table(config, root, origin);
  for (const auto& o : overrides) apply_override(config, o);
  validate(config);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return config_from_string(read_input_file(path, "config file"), path, overrides);
}

std::set<std::string> given_keys(const std::string& path, const std::vector<std::string>& overrides) {
  std::set<std::string> keys;
  const toml::table root = toml::parse(read_input_file(path, "config file"), path);  // load_config has read it
  for (const auto& [section, table] : root)
    if (const auto* entries = table.as_table())
      for (const auto& [key, value] : *entries) keys.insert(std::string(section.str()) + "." + std::string(key.str()));
  for (const auto& assignment : overrides) keys.insert(assignment.substr(0, assignment.find('=')));
  return keys;
}

std::string field_to_toml(Config& config, const FieldSpec& field) {
  std::ostringstream value;
  std::visit(
      [&](auto slot) {
        using T = std::remove_pointer_t<decltype(slot)>;
        if constexpr (std::is_same_v<T, ChoiceSlot>) {
          value << toml::value<std::string>(field.choices.at(slot.get()));
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          toml::array items;
          for (const auto& s : *slot) items.push_back(s);
          value << items;
        } else if constexpr (std::is_same_v<T, double>) {
          // The shortest text that reads back as the same double (0.28, not 0.28000000000000003), kept a TOML
          // float by a ".0" where it would otherwise read as an integer.
          std::string text = fmt::format("{}", *slot);
          if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
          value << text;
        } else {
          value << toml::value<T>(*slot);
        }
      },
      field.slot(config));
  return value.str();
}

std::string config_to_toml(const Config& config, bool with_docs) {
  Config copy = config;
  std::string out;
  std::string current;
  for (const auto& field : config_schema()) {
    if (field.section != current) {
      out += fmt::format("{}[{}]\n", current.empty() ? "" : "\n", field.section);
      current = field.section;
    }
    if (with_docs) {
      std::string allowed = field.choices.empty() ? "" : fmt::format(" ({})", fmt::join(field.choices, " | "));
      out += fmt::format("# {}{}\n", field.doc, allowed);
    }
    out += fmt::format("{} = {}\n", field.key, field_to_toml(copy, field));
  }
  return out;
}

}  // namespace inkstone
