#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/json_error.h"

namespace inkstone {
namespace {

// Runs `read` on the document and returns what the user is told.
template <typename Read>
std::string told(const std::string& text, Read read) {
  const auto document = nlohmann::json::parse(text);
  try {
    read(document);
  } catch (const nlohmann::json::exception& e) {
    return describe_json_error(e);
  }
  return "no error";
}

TEST(JsonError, NamesTheKeyTheExpectedTypeAndTheFoundOne) {
  EXPECT_EQ(told(R"({"splits": {"train": {"tokens": "x"}}})",
                 [](const nlohmann::json& d) { d.at("splits").at("train").at("tokens").get<int64_t>(); }),
            "key 'splits/train/tokens' must be a number, not a string");
  EXPECT_EQ(told(R"({"a": [1, null]})", [](const nlohmann::json& d) { d.at("a").at(1).get<double>(); }),
            "key 'a/1' must be a number, not a null");
  EXPECT_EQ(told(R"({"a": {"kind": 5}})", [](const nlohmann::json& d) { d.at("a").at("kind").get<std::string>(); }),
            "key 'a/kind' must be a string, not a number");
  EXPECT_EQ(told(R"([1])", [](const nlohmann::json& d) { d.get<std::string>(); }),
            "the document must be a string, not an array");
}

TEST(JsonError, NamesAMissingKeyWithItsPath) {
  EXPECT_EQ(told(R"({"splits": {"train": {}}})",
                 [](const nlohmann::json& d) { d.at("splits").at("train").at("tokens"); }),
            "key 'splits/train/tokens' is missing");
  EXPECT_EQ(told(R"({})", [](const nlohmann::json& d) { d.at("format"); }), "key 'format' is missing");
  EXPECT_EQ(told(R"({"merges": [["a"]]})", [](const nlohmann::json& d) { d.at("merges").at(0).at(1); }),
            "key 'merges/0' has no entry 1");
}

// RFC 6901 escapes read as the key they stand for; a key holding '/' is quoted so the path stays unambiguous.
TEST(JsonError, PointerEscapesAreReadAsTheKeyTheyName) {
  EXPECT_EQ(told(R"({"a/b": {"c~d": 1}})", [](const nlohmann::json& d) { d.at("a/b").at("c~d").get<std::string>(); }),
            "key '\"a/b\"/c~d' must be a string, not a number");
}

// A member read through json_member keeps its place in the document (json::value would return a detached copy).
TEST(JsonError, AMemberReadWithAFallbackKeepsItsPath) {
  const auto document = nlohmann::json::parse(R"({"outer": {"inner": {"n": "x"}}})");
  EXPECT_EQ(told(R"({"outer": {"inner": {"n": "x"}}})",
                 [](const nlohmann::json& d) { json_member(d.at("outer"), "inner", json_null()).at("n").get<int>(); }),
            "key 'outer/inner/n' must be a number, not a string");
  EXPECT_TRUE(json_member(document, "absent", json_null()).is_null());
  EXPECT_EQ(&json_member(document, "absent", json_empty_array()), &json_empty_array());
  EXPECT_EQ(told("[1]", [](const nlohmann::json& d) { json_member(d, "k", json_null()); }),
            "cannot use at() with array");
}

}  // namespace
}  // namespace inkstone
