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

}  // namespace
}  // namespace inkstone
