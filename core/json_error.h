// The JSON library's exceptions in the user's words: which key, what was expected, what was found.
//
// The library is built with JSON_DIAGNOSTICS (CMakeLists.txt), so its type and key errors carry the JSON pointer
// of the value at fault; this turns "[json.exception.type_error.302] (/splits/train/tokens) type must be number,
// but is string" into "key 'splits/train/tokens' must be a number, not a string".
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace inkstone {

std::string describe_json_error(const nlohmann::json::exception& error);

// `object[key]` when the object has it, else `fallback` (which must outlive the result): unlike json::value, which
// returns a copy cut off from its document, errors inside the member still name their whole path.
const nlohmann::json& json_member(const nlohmann::json& object, const char* key, const nlohmann::json& fallback);
// A temporary document or fallback would leave the result dangling.
const nlohmann::json& json_member(nlohmann::json&& object, const char* key, const nlohmann::json& fallback) = delete;
const nlohmann::json& json_member(const nlohmann::json& object, const char* key, nlohmann::json&& fallback) = delete;

// Fallbacks for json_member that live as long as the program.
const nlohmann::json& json_null();
const nlohmann::json& json_empty_array();

}  // namespace inkstone
