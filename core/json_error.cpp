#include "core/json_error.h"

#include <fmt/format.h>

#include <regex>

namespace inkstone {
namespace {

// "number" -> "a number", "array" -> "an array".
std::string with_article(const std::string& type) {
  const bool vowel = !type.empty() && std::string("aeiou").find(type.front()) != std::string::npos;
  return (vowel ? "an " : "a ") + type;
}

// A JSON pointer as the key path users read in the file: "/splits/train" -> "splits/train", "" -> "".
std::string key_path(const std::string& pointer) { return pointer.empty() ? pointer : pointer.substr(1); }

std::string joined(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "/" + key;
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

}  // namespace inkstone
