// Optional fields of a Hugging Face tokenizer.json: a flag that is absent or null takes the format's default.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace inkstone {

inline bool json_flag(const nlohmann::json& object, const char* key, bool fallback) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

// A token id as tokenizer.json writes it: an integer in [0, 2^31); InputError naming `what` otherwise (the JSON
// library would wrap 2^62 to 0 and truncate 3.5 to 3 without a word).
inline int32_t json_token_id(const nlohmann::json& value, const std::string& what) {
  if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<uint64_t>() > INT32_MAX) ||
      (!value.is_number_unsigned() && (value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)))
    throw InputError(fmt::format("{} must be a token id, an integer in [0, {}], found {}", what, INT32_MAX,
                                 value.dump()));
  return static_cast<int32_t>(value.get<int64_t>());
}

}  // namespace inkstone
