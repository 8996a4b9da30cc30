#include "core/json_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

namespace inkstone {
namespace {

// "number" -> "a number", "array" -> "an array".
std::string with_article(const std::string& type) {
  const bool vowel = !type.empty() && std::string("aeiou").find(type.front()) != std::string::npos;
  return (vowel ? "an " : "a ") + type;
}

// One reference token of a JSON pointer as the key it names (RFC 6901: "~1" is '/', "~0" is '~').
std::string unescaped(const std::string& token) {
  std::string key;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      key += token[++i] == '0' ? '~' : '/';
    } else {
      key += token[i];
    }
  }
  return key;
}

// One key of a path as users read it: a key that holds a '/' itself is quoted, so the path stays unambiguous.
std::string path_key(const std::string& key) { return key.find('/') == std::string::npos ? key : '"' + key + '"'; }

std::string joined(const std::string& parent, const std::string& key) {
  return parent.empty() ? path_key(key) : parent + "/" + path_key(key);
}

// A JSON pointer as the key path users read in the file: "/splits/train" -> "splits/train", "" -> "",
// "/model/a~1b" -> model/"a/b".
std::string key_path(const std::string& pointer) {
  std::string path;
  size_t start = 1;
  while (start <= pointer.size()) {
    const size_t end = std::min(pointer.find('/', start), pointer.size());
    path = joined(path, unescaped(pointer.substr(start, end - start)));
    start = end + 1;
  }
  return path;
}

}  // namespace

std::string describe_json_error(const nlohmann::json::exception& error) {
  // what() is "[json.exception.<kind>.<id>] (<pointer>) <message>", the pointer present when the value sits in a
  // parsed document.
  static const std::regex pattern(R"(^\[json\.exception\.[a-z_]+\.\d+\] (?:\(([^)]*)\) )?(.*)$)");
  static const std::regex wrong_type(R"(^type must be (\w+), but is (\w+)$)");
  static const std::regex missing_key(R"(^key '(.*)' not found$)");
  static const std::regex missing_index(R"(^array index (\d+) is out of range$)");
  std::smatch parts;
  const std::string text = error.what();
  if (!std::regex_match(text, parts, pattern)) return text;
  const std::string where = key_path(parts[1].str()), message = parts[2].str();
  std::smatch detail;
  if (std::regex_match(message, detail, wrong_type)) {
    const std::string subject = where.empty() ? std::string("the document") : fmt::format("key '{}'", where);
    return fmt::format("{} must be {}, not {}", subject, with_article(detail[1].str()), with_article(detail[2].str()));
  }
  if (std::regex_match(message, detail, missing_key))
    return fmt::format("key '{}' is missing", joined(where, detail[1].str()));
  if (std::regex_match(message, detail, missing_index))
    return fmt::format("key '{}' has no entry {}", where, detail[1].str());
  return where.empty() ? message : fmt::format("key '{}': {}", where, message);
}

const nlohmann::json& json_member(const nlohmann::json& object, const char* key, const nlohmann::json& fallback) {
  if (!object.is_object()) return object.at(key);  // the library's own refusal, as json::value gives
  const auto found = object.find(key);
  return found == object.end() ? fallback : *found;
}

const nlohmann::json& json_null() {
  static const nlohmann::json null_value;
  return null_value;
}

const nlohmann::json& json_empty_array() {
  static const nlohmann::json empty = nlohmann::json::array();
  return empty;
}

}  // namespace inkstone
