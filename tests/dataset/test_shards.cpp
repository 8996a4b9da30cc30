// Token shards: write/read round trips in both dtypes, the manifest, and every check made at open.
#include <gtest/gtest.h>

#include <fstream>

#include <xxhash.h>

#include "core/errors.h"
#include "dataset/shards.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

// Writes `documents` (eos included) as the train split of `dir` and returns the manifest it recorded.
Manifest write_train(const fs::path& dir, const std::vector<std::vector<int32_t>>& documents, int64_t vocab_size,
                     int64_t max_shard_tokens) {
  Manifest manifest;
  manifest.tokenizer_kind = "test";
  manifest.tokenizer_fingerprint = "0123456789abcdef";
  manifest.vocab_size = vocab_size;
  manifest.eos = 1;
  manifest.pad = 2;
  manifest.dtype = dtype_for_vocab(vocab_size);
  ShardWriter writer(dir, "train", manifest.dtype, vocab_size, max_shard_tokens);
  for (const auto& document : documents) {
    writer.append(document, static_cast<int64_t>(document.size()) - 1);
    writer.end_document();
  }
  manifest.splits["train"] = writer.finish();
  write_manifest(dir, manifest);
  return manifest;
}

std::vector<int32_t> read_all(const SplitTokens& tokens) {
  std::vector<int32_t> ids(static_cast<size_t>(tokens.size()));
  tokens.read(0, tokens.size(), ids.data());
  return ids;
}

using testing::input_error_of;

void round_trip(int64_t vocab_size, TokenDtype expected_dtype, int32_t largest_id) {
  const auto dir = testing::temp_dir("shards_round_trip_" + dtype_name(expected_dtype));
  const std::vector<std::vector<int32_t>> documents = {
      {5, 6, 7, 1}, {largest_id, 0, 1}, {9, 9, 9, 9, 9, 1}, {3, 1}};
  const Manifest manifest = write_train(dir, documents, vocab_size, /*max_shard_tokens=*/5);
  EXPECT_EQ(manifest.dtype, expected_dtype);

  // Shards close at the first document end at or past 5 tokens: [doc0, doc1] (7), [doc2] (6), [doc3] (2).
  const SplitInfo& split = manifest.splits.at("train");
  ASSERT_EQ(split.shards.size(), 3u);
  EXPECT_EQ(split.shards[0].file, "train_00000.bin");
  EXPECT_EQ(split.shards[0].tokens, 7);
  EXPECT_EQ(split.shards[0].documents, 2);
  EXPECT_EQ(split.shards[1].tokens, 6);
  EXPECT_EQ(split.shards[2].documents, 1);
  EXPECT_EQ(split.tokens, 15);
  EXPECT_EQ(split.documents, 4);
  EXPECT_EQ(split.text_bytes, 11);
  EXPECT_EQ(fs::file_size(dir / "train_00001.bin"), 6u * dtype_bytes(expected_dtype));

  SplitTokens tokens(dir, read_manifest(dir), "train", /*verify=*/true);
  std::vector<int32_t> expected;
  for (const auto& document : documents) expected.insert(expected.end(), document.begin(), document.end());
  EXPECT_EQ(read_all(tokens), expected);

  // A read across the boundary of shards 0 and 1.
  std::vector<int32_t> middle(4);
  tokens.read(5, 4, middle.data());
  EXPECT_EQ(middle, (std::vector<int32_t>{0, 1, 9, 9}));
  EXPECT_EQ(tokens.document_starts(1), (std::vector<int64_t>{0, 4, 7, 13, 15}));
}

TEST(ShardRoundTrip, Uint16) { round_trip(300, TokenDtype::uint16, 299); }

TEST(ShardRoundTrip, Uint32) { round_trip(70000, TokenDtype::uint32, 69999); }

TEST(ShardRoundTrip, BytesAreLittleEndianIds) {
  const auto dir = testing::temp_dir("shards_bytes");
  write_train(dir, {{0x0102, 1}}, 1000, 100);
  std::ifstream file(dir / "train_00000.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, std::string("\x02\x01\x01\x00", 4));
}

TEST(ShardDtype, Uint16WhileEveryIdFits) {
  EXPECT_EQ(dtype_for_vocab(260), TokenDtype::uint16);
  EXPECT_EQ(dtype_for_vocab(65536), TokenDtype::uint16);
  EXPECT_EQ(dtype_for_vocab(65537), TokenDtype::uint32);
}

TEST(ShardManifest, RecordsEverythingAndRoundTrips) {
  const auto dir = testing::temp_dir("shards_manifest");
  Manifest written = write_train(dir, {{4, 1}, {5, 5, 1}}, 300, 100);
  written.val_fraction = 0.25;
  written.val_rule = "rule";
  write_manifest(dir, written);

  std::ifstream file(manifest_path(dir));
  const auto json = nlohmann::json::parse(file);
  EXPECT_EQ(json.at("format"), "inkstone-token-shards");
  EXPECT_EQ(json.at("format_version"), kShardFormatVersion);
  EXPECT_EQ(json.at("dtype"), "uint16");
  EXPECT_EQ(json.at("byte_order"), "little");
  EXPECT_EQ(json.at("tokenizer").at("fingerprint"), "0123456789abcdef");
  EXPECT_EQ(json.at("tokenizer").at("vocab_size"), 300);
  EXPECT_EQ(json.at("tokenizer").at("eos"), 1);
  EXPECT_EQ(json.at("tokenizer").at("file"), "tokenizer.json");
  EXPECT_EQ(json.at("validation").at("fraction"), 0.25);
  const auto& train = json.at("splits").at("train");
  EXPECT_EQ(train.at("tokens"), 5);
  EXPECT_EQ(train.at("documents"), 2);
  EXPECT_EQ(train.at("text_bytes"), 3);
  ASSERT_EQ(train.at("shards").size(), 1u);
  const std::vector<uint16_t> ids = {4, 1, 5, 5, 1};
  EXPECT_EQ(train.at("shards")[0].at("xxh64"),
            fmt::format("{:016x}", XXH64(ids.data(), ids.size() * sizeof(uint16_t), 0)));

  const Manifest read = read_manifest(dir);
  EXPECT_EQ(manifest_to_json(read), manifest_to_json(written));
}

TEST(ShardManifest, MissingEmptyOrBrokenIsAnInputErrorNamingTheFile) {
  const auto dir = testing::temp_dir("shards_manifest_errors");
  const std::string path = manifest_path(dir).string();
  EXPECT_EQ(input_error_of([&] { read_manifest(dir); }),
            path + ": missing; make the data folder with `inkstone data prepare`");
  std::ofstream(manifest_path(dir)).close();
  EXPECT_EQ(input_error_of([&] { read_manifest(dir); }), path + ": empty file");
  std::ofstream(manifest_path(dir)) << "{\"format\": ";
  EXPECT_EQ(input_error_of([&] { read_manifest(dir); }), path + ": not valid JSON");
  std::ofstream(manifest_path(dir)) << "{\"format\": \"inkstone-token-shards\", \"format_version\": 1}";
  EXPECT_EQ(input_error_of([&] { read_manifest(dir); }), path + ": key 'tokenizer' is missing");
}

TEST(ShardChecks, FlippedByteFailsTheChecksumNamingTheFile) {
  const auto dir = testing::temp_dir("shards_checksum");
  const Manifest manifest = write_train(dir, {{7, 8, 9, 1}}, 300, 100);
  {
    std::fstream file(dir / "train_00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2);
    file.put('\x05');
  }
  const std::string error = input_error_of([&] { SplitTokens(dir, manifest, "train", /*verify=*/true); });
  EXPECT_EQ(error.rfind((dir / "train_00000.bin").string() + ": checksum mismatch", 0), 0u) << error;
  // Skipping verification opens it and reads the changed id.
  SplitTokens unverified(dir, manifest, "train", /*verify=*/false);
  EXPECT_EQ(read_all(unverified), (std::vector<int32_t>{7, 5, 9, 1}));
}

TEST(ShardChecks, IdOutsideTheVocabularyIsRefusedWhenWritingAndOpening) {
  const auto dir = testing::temp_dir("shards_range");
  {
    ShardWriter writer(dir, "train", TokenDtype::uint16, 300, 100);
    EXPECT_EQ(input_error_of([&] { writer.append({5, 300}, 2); }), "token id 300 is outside the vocabulary of 300 ids");
    EXPECT_EQ(input_error_of([&] { writer.append({-1}, 1); }), "token id -1 is outside the vocabulary of 300 ids");
  }

  // A folder whose manifest claims a smaller vocabulary than its shards use.
  Manifest manifest = write_train(dir, {{7, 250, 1}}, 300, 100);
  manifest.vocab_size = 200;
  EXPECT_EQ(input_error_of([&] { SplitTokens(dir, manifest, "train", /*verify=*/true); }),
            (dir / "train_00000.bin").string() + ": token id 250 at position 1 is outside the vocabulary of 200 ids");
}

TEST(ShardChecks, MissingEmptyOrTruncatedShardNamesTheFile) {
  const auto dir = testing::temp_dir("shards_missing");
  const Manifest manifest = write_train(dir, {{7, 8, 9, 1}}, 300, 100);
  const auto shard = dir / "train_00000.bin";

  fs::resize_file(shard, 6);
  EXPECT_EQ(input_error_of([&] { SplitTokens(dir, manifest, "train", false); }),
            shard.string() + ": 6 bytes but the manifest says 4 tokens of uint16");
  fs::resize_file(shard, 0);
  EXPECT_EQ(input_error_of([&] { SplitTokens(dir, manifest, "train", false); }), shard.string() + ": empty file");
  fs::remove(shard);
  EXPECT_EQ(input_error_of([&] { SplitTokens(dir, manifest, "train", false); }).rfind(shard.string() + ": cannot open", 0),
            0u);
  EXPECT_EQ(input_error_of([&] { SplitTokens(dir, manifest, "val", false); }),
            manifest_path(dir).string() + ": no split 'val'");
}

}  // namespace
}  // namespace inkstone
