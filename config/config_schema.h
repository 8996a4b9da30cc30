// The config schema: every key of every section with its type, default, documentation and allowed values.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"

namespace inkstone {

using FieldValue = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;
// A key parsed into an enum (config.h, ChoiceNames): its value as an index into FieldSpec::choices.
struct ChoiceSlot {
  std::function<size_t()> get;
  std::function<void(size_t)> set;
};
using FieldSlot = std::variant<int64_t*, double*, bool*, std::string*, std::vector<std::string>*, ChoiceSlot>;

struct FieldSpec {
  std::string section;
  std::string key;
  FieldValue default_value;  // an enum's: its name
  std::string doc;
  std::function<FieldSlot(Config&)> slot;
  std::optional<double> min;         // numbers: inclusive bounds
  std::optional<double> max;
  bool min_exclusive = false;        // (min, max]: a value that must be positive
  std::vector<std::string> choices;  // strings: the allowed values, when restricted; an enum's names
  bool no_empty_entries = false;     // string lists: an empty entry is refused (it would match everywhere)

  std::string name() const { return section + "." + key; }
  std::string type_name() const;
};

// All fields, sections in the order they are documented.
const std::vector<FieldSpec>& config_schema();
const std::vector<std::string>& config_sections();

// One field's current value as TOML text (the form config_to_toml writes).
std::string field_to_toml(Config& config, const FieldSpec& field);

// Range and choice checks of one field's current value; `location` names where the value came from.
void check_field_value(Config& config, const FieldSpec& field, const std::string& location);

}  // namespace inkstone
