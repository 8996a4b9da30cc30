// safetensors: exact round trip of every dtype, the on-disk layout, and a one-line InputError for each defect.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/errors.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file from a hand-written header and data section, for the defects our writer never produces.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string error_of(const fs::path& path) {
  try {
    read_safetensors(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Every 16-bit pattern, for the half-precision dtypes whose bits must survive unchanged (NaN payloads included).
torch::Tensor all_16_bit_patterns(torch::ScalarType type) {
  return torch::arange(0, 65536, torch::kInt32).to(torch::kInt16).view(type);
}

TEST(Safetensors, EveryDtypeRoundTripsBitExactly) {
  const fs::path file = testing::temp_dir("st_dtypes") / "all.safetensors";
  const float inf = std::numeric_limits<float>::infinity();
  NamedTensors tensors = {
      {"f32", torch::tensor({0.0f, -0.0f, 1.5f, -inf, inf, 1e-45f, 3.4e38f}).reshape({7, 1})},
      {"f64", torch::randn({3, 4}, torch::kFloat64)},
      {"bf16", all_16_bit_patterns(torch::kBFloat16)},
      {"f16", all_16_bit_patterns(torch::kFloat16)},
      {"i64", torch::tensor({INT64_MIN, int64_t{-1}, int64_t{0}, INT64_MAX})},
      {"i32", torch::tensor({INT32_MIN, 7, INT32_MAX}, torch::kInt32)},
      {"i16", torch::arange(-5, 5, torch::kInt16).reshape({2, 5})},
      {"u8", torch::arange(0, 256, torch::kInt32).to(torch::kUInt8)},
      {"bool", torch::tensor({true, false, true})},
      {"scalar", torch::tensor(2.5)},
      {"empty", torch::zeros({0, 3})},
      {"transposed", torch::arange(6, torch::kFloat32).reshape({2, 3}).t()},
  };
  write_safetensors(file, tensors, {{"format", "pt"}, {"note", "a b"}});
  SafetensorsFile read = read_safetensors(file);

  EXPECT_EQ(read.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "a b"}}));
  ASSERT_EQ(read.tensors.size(), tensors.size());
  std::map<std::string, torch::Tensor> by_name(read.tensors.begin(), read.tensors.end());
  std::set<torch::ScalarType> dtypes;
  for (const auto& [name, tensor] : read.tensors) dtypes.insert(tensor.scalar_type());
  EXPECT_EQ(dtypes.size(), 9u);
  for (const auto& [name, original] : tensors) {
    SCOPED_TRACE(name);
    const torch::Tensor& loaded = by_name.at(name);
    EXPECT_EQ(loaded.scalar_type(), original.scalar_type());
    EXPECT_EQ(loaded.sizes(), original.sizes());
    // Compare raw bytes, so NaN patterns and -0.0 count too.
    torch::Tensor a = original.contiguous().flatten().view(torch::kUInt8);
    torch::Tensor b = loaded.contiguous().flatten().view(torch::kUInt8);
    EXPECT_TRUE(torch::equal(a, b));
  }
}

TEST(Safetensors, HeaderIsAlignedAndDataIsPackedInNameOrder) {
  const fs::path file = testing::temp_dir("st_layout") / "layout.safetensors";
  write_safetensors(file, {{"b", torch::ones({3}, torch::kInt16)}, {"a", torch::ones({1}, torch::kUInt8)},
                           {"c", torch::ones({2, 2})}});
  const std::string bytes = read_bytes(file);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + header_size) % 8, 0u);
  const std::string header_text = bytes.substr(8, header_size);
  EXPECT_EQ(header_text.find_last_not_of(' '), header_text.find_last_of('}'));
  const auto header = nlohmann::json::parse(header_text);
  EXPECT_FALSE(header.contains("__metadata__"));  // written only when there is some
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 1}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({1, 7}));
  EXPECT_EQ(header["c"]["data_offsets"], nlohmann::json({7, 23}));
  EXPECT_EQ(header["c"]["dtype"], "F32");
  EXPECT_EQ(header["c"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(bytes.size(), 8 + header_size + 23);
}

// Each defect names the file, says what is wrong, and fits on one line.
void expect_error(const fs::path& file, const std::string& expected_part) {
  const std::string message = error_of(file);
  EXPECT_NE(message.find(file.string()), std::string::npos) << message;
  EXPECT_NE(message.find(expected_part), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(Safetensors, DefectsAreOneLineInputErrorsNamingTheFile) {
  const fs::path dir = testing::temp_dir("st_errors");
  const std::string four_floats(16, '\0');
  const auto entry = [](const std::string& dtype, const std::string& shape, int begin, int end) {
    return "\"" + dtype + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"abc", "shorter than the 8-byte header length"},
      {raw_file("{}", "").substr(0, 8) + "{", "runs past the end of the file"},
      {raw_file("{\"x\": [1,", ""), "header is not valid JSON"},
      {raw_file("{" + entry("F99", "[4]", 0, 16) + "}", four_floats), "unknown dtype 'F99'"},
      {raw_file("{" + entry("F32", "[4]", 0, 16) + "}", four_floats.substr(0, 8)), "truncated data"},
      {raw_file("{" + entry("F32", "[4]", 8, 24) + "}", four_floats), "truncated data"},
      {raw_file("{" + entry("F32", "[3]", 0, 16) + "}", four_floats), "span 16 bytes, but its F32 shape needs 12"},
      {raw_file("{" + entry("F32", "[4]", 0, 16) + "," + entry("I32", "[2]", 8, 16) + "}", four_floats), "overlap"},
      {raw_file("{" + entry("F32", "[2]", 8, 16) + "}", four_floats), "gap in the data"},
      {raw_file("{" + entry("F32", "[2]", 0, 8) + "}", four_floats), "unused bytes after the last tensor"},
      {raw_file("{\"F32\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "1234"),
       "not a non-negative integer"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].second);
    const fs::path file = dir / ("case" + std::to_string(i) + ".safetensors");
    write_bytes(file, cases[i].first);
    expect_error(file, cases[i].second);
  }
}

TEST(Safetensors, TruncatedFileFromTheWriterIsAnInputError) {
  const fs::path file = testing::temp_dir("st_truncated") / "model.safetensors";
  write_safetensors(file, {{"w", torch::randn({16, 16})}});
  fs::resize_file(file, fs::file_size(file) - 5);
  expect_error(file, "truncated data");
}

TEST(Safetensors, WriterRejectsDuplicatesAndUnsupportedDtypes) {
  const fs::path file = testing::temp_dir("st_reject") / "x.safetensors";
  EXPECT_THROW(write_safetensors(file, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors(file, {{"c", torch::ones({1}, torch::kComplexFloat)}}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(file));
}

}  // namespace
}  // namespace inkstone
