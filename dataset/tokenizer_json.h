// Optional fields of a Hugging Face tokenizer.json: a flag that is absent or null takes the format's default.
#pragma once
#include <nlohmann/json.hpp>

namespace inkstone {

inline bool json_flag(const nlohmann::json& object, const char* key, bool fallback) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? fallback : it->get<bool>();
}

}  // namespace inkstone
