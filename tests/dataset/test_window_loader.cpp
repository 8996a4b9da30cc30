// WindowLoader: deterministic, resumable, rank-distinct training windows in pack and pad mode; the eval sweep;
// the checks made at open.
#include <gtest/gtest.h>

#include <set>

#include "core/errors.h"
#include "dataset/window_loader.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kEos = 257;
constexpr int32_t kPad = 258;
constexpr const char* kFingerprint = "feedfacefeedface";

// Document d has 3 + (d * 7) % 20 tokens of value (d + j) % 256, then eos: lengths vary from 4 to 23.
std::vector<std::vector<int32_t>> make_documents(int count) {
  std::vector<std::vector<int32_t>> documents;
  for (int d = 0; d < count; ++d) {
    std::vector<int32_t> document;
    for (int j = 0; j < 3 + (d * 7) % 20; ++j) document.push_back((d + j) % 256);
    document.push_back(kEos);
    documents.push_back(document);
  }
  return documents;
}

// A data folder whose train split holds `documents`, in shards of about 50 tokens so windows cross shards.
fs::path write_folder(const std::string& name, const std::vector<std::vector<int32_t>>& documents) {
  const auto dir = testing::temp_dir(name);
  Manifest manifest;
  manifest.tokenizer_kind = "test";
  manifest.tokenizer_fingerprint = kFingerprint;
  manifest.vocab_size = 260;
  manifest.eos = kEos;
  manifest.pad = kPad;
  ShardWriter writer(dir, "train", manifest.dtype, manifest.vocab_size, /*max_shard_tokens=*/50);
  for (const auto& document : documents) {
    writer.append(document, static_cast<int64_t>(document.size()) - 1);
    writer.end_document();
  }
  manifest.splits["train"] = writer.finish();
  manifest.splits["val"] = SplitInfo{};
  write_manifest(dir, manifest);
  return dir;
}

std::vector<int32_t> concatenated(const std::vector<std::vector<int32_t>>& documents) {
  std::vector<int32_t> stream;
  for (const auto& document : documents) stream.insert(stream.end(), document.begin(), document.end());
  return stream;
}

std::vector<int32_t> row(const TokenBatch& batch, int64_t r) {
  auto begin = batch.tokens.begin() + r * batch.cols;
  return {begin, begin + batch.cols};
}

WindowLoaderOptions options(WindowMode mode, int64_t window_len, uint64_t seed = 7, int64_t rank = 0) {
  WindowLoaderOptions o;
  o.mode = mode;
  o.window_len = window_len;
  o.seed = seed;
  o.rank = rank;
  return o;
}

using testing::input_error_of;

class WindowLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    documents_ = make_documents(40);
    stream_ = concatenated(documents_);
    dir_ = write_folder("window_loader", documents_);
  }
  std::vector<std::vector<int32_t>> documents_;
  std::vector<int32_t> stream_;
  fs::path dir_;
};

TEST_F(WindowLoaderTest, ReportsTheSplitTotals) {
  WindowLoader loader(dir_, options(WindowMode::pack, 16));
  EXPECT_EQ(loader.total_tokens(), static_cast<int64_t>(stream_.size()));
  EXPECT_EQ(loader.total_documents(), 40);
  EXPECT_EQ(loader.total_bytes(), static_cast<int64_t>(stream_.size()) - 40);
  EXPECT_DOUBLE_EQ(loader.bytes_per_token(), (stream_.size() - 40.0) / stream_.size());
}

TEST_F(WindowLoaderTest, SameSeedStepAndRankGiveTheSameBatch) {
  WindowLoader a(dir_, options(WindowMode::pack, 16));
  WindowLoader b(dir_, options(WindowMode::pack, 16));
  EXPECT_EQ(a.train_batch(3, 8).tokens, b.train_batch(3, 8).tokens);
  EXPECT_NE(a.train_batch(3, 8).tokens, a.train_batch(4, 8).tokens);
  WindowLoader other_seed(dir_, options(WindowMode::pack, 16, /*seed=*/8));
  EXPECT_NE(a.train_batch(3, 8).tokens, other_seed.train_batch(3, 8).tokens);
}

TEST_F(WindowLoaderTest, RanksDrawDifferentRowsOfOneGlobalBatch) {
  WindowLoader rank0(dir_, options(WindowMode::pack, 16, 7, /*rank=*/0));
  WindowLoader rank1(dir_, options(WindowMode::pack, 16, 7, /*rank=*/1));
  const TokenBatch a = rank0.train_batch(5, 4);
  const TokenBatch b = rank1.train_batch(5, 4);
  EXPECT_NE(a.tokens, b.tokens);
  // Rank 1's rows are rows 4..7 of the same step's global batch of 8 drawn by one process.
  const TokenBatch global = rank0.train_batch(5, 8);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(row(global, r), row(a, r));
    EXPECT_EQ(row(global, 4 + r), row(b, r));
  }
}

TEST_F(WindowLoaderTest, PackWindowsAreSlicesOfTheStream) {
  WindowLoader loader(dir_, options(WindowMode::pack, 16));
  std::set<std::vector<int32_t>> distinct;
  for (int64_t step = 0; step < 20; ++step) {
    const TokenBatch batch = loader.train_batch(step, 4);
    ASSERT_EQ(batch.rows, 4);
    ASSERT_EQ(batch.cols, 16);
    EXPECT_EQ(batch.real_tokens(), 64);
    for (int64_t r = 0; r < batch.rows; ++r) {
      const auto window = row(batch, r);
      auto found = std::search(stream_.begin(), stream_.end(), window.begin(), window.end());
      ASSERT_NE(found, stream_.end()) << "step " << step << " row " << r;
      distinct.insert(window);
    }
  }
  // 80 draws over about 500 offsets spread rather than repeat (some windows recur in the data itself).
  EXPECT_GT(distinct.size(), 40u);
}

TEST_F(WindowLoaderTest, ABatchDoesNotDependOnTheStepsDrawnBefore) {
  WindowLoader continuous(dir_, options(WindowMode::pack, 16));
  TokenBatch at_step_9;
  for (int64_t step = 0; step <= 9; ++step) at_step_9 = continuous.train_batch(step, 4);
  WindowLoader resumed(dir_, options(WindowMode::pack, 16));
  EXPECT_EQ(resumed.train_batch(9, 4).tokens, at_step_9.tokens);
}

TEST_F(WindowLoaderTest, PadWindowsStartAtDocumentsAndPadAfterEos) {
  WindowLoader loader(dir_, options(WindowMode::pad, 16));
  int64_t padded_rows = 0;
  for (int64_t step = 0; step < 10; ++step) {
    const TokenBatch batch = loader.train_batch(step, 6);
    for (int64_t r = 0; r < batch.rows; ++r) {
      const auto window = row(batch, r);
      // The document this row starts with: the one whose first tokens match (starts are distinct by construction).
      auto document = std::find_if(documents_.begin(), documents_.end(), [&](const std::vector<int32_t>& d) {
        const size_t n = std::min<size_t>(d.size(), 16);
        return std::equal(d.begin(), d.begin() + n, window.begin());
      });
      ASSERT_NE(document, documents_.end());
      const int64_t real = std::min<int64_t>(document->size(), 16);
      int64_t row_real = 0;
      for (int64_t c = 0; c < 16; ++c) {
        const bool is_real = batch.real[r * 16 + c] == 1;
        EXPECT_EQ(is_real, c < real);
        if (!is_real) EXPECT_EQ(window[c], kPad);
        row_real += is_real;
      }
      EXPECT_EQ(row_real, real);
      padded_rows += real < 16;
    }
  }
  EXPECT_GT(padded_rows, 0);
}

TEST_F(WindowLoaderTest, PackEvalSweepsWholeWindowsInOrder) {
  WindowLoader loader(dir_, options(WindowMode::pack, 16));
  const int64_t windows = static_cast<int64_t>(stream_.size()) / 16;
  ASSERT_EQ(loader.num_eval_windows(), windows);
  std::vector<int32_t> swept;
  for (int64_t first = 0; first < windows; first += 5) {
    const TokenBatch batch = loader.eval_batch(first, std::min<int64_t>(5, windows - first));
    EXPECT_EQ(batch.real_tokens(), batch.rows * 16);
    swept.insert(swept.end(), batch.tokens.begin(), batch.tokens.end());
  }
  EXPECT_EQ(swept, std::vector<int32_t>(stream_.begin(), stream_.begin() + windows * 16));
  EXPECT_THROW(loader.eval_batch(windows - 1, 2), std::out_of_range);
}

TEST_F(WindowLoaderTest, PadEvalScoresEveryTokenOnceInDocumentWindows) {
  WindowLoader loader(dir_, options(WindowMode::pad, 8));
  int64_t expected_windows = 0;
  for (const auto& document : documents_) expected_windows += (document.size() + 7) / 8;
  ASSERT_EQ(loader.num_eval_windows(), expected_windows);
  const TokenBatch batch = loader.eval_batch(0, expected_windows);
  std::vector<int32_t> real_tokens;
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    if (batch.real[i]) real_tokens.push_back(batch.tokens[i]);
  }
  EXPECT_EQ(real_tokens, stream_);
  // The first document has 4 tokens: window 0 is it, padded; window 1 starts the second document.
  EXPECT_EQ(row(batch, 0), (std::vector<int32_t>{0, 1, 2, kEos, kPad, kPad, kPad, kPad}));
  EXPECT_EQ(row(batch, 1)[0], documents_[1][0]);
}

TEST_F(WindowLoaderTest, TokenizerFingerprintMustMatchWhenGiven) {
  WindowLoaderOptions o = options(WindowMode::pack, 16);
  o.expected_tokenizer_fingerprint = kFingerprint;
  EXPECT_NO_THROW(WindowLoader(dir_, o));
  o.expected_tokenizer_fingerprint = "0000000000000000";
  EXPECT_EQ(input_error_of([&] { WindowLoader(dir_, o); }),
            (dir_ / "manifest.json").string() + ": made with tokenizer feedfacefeedface but this run uses tokenizer "
                                                "0000000000000000; prepare the data again with this tokenizer or use "
                                                "the folder's tokenizer.json");
}

TEST_F(WindowLoaderTest, SplitTooSmallForOneWindowIsAnInputError) {
  const auto tokens = static_cast<int64_t>(stream_.size());
  EXPECT_NO_THROW(WindowLoader(dir_, options(WindowMode::pack, tokens)));
  EXPECT_EQ(input_error_of([&] { WindowLoader(dir_, options(WindowMode::pack, tokens + 1)); }),
            fmt::format("{} split 'train' has {} tokens, fewer than one window of {}", dir_.string(), tokens,
                        tokens + 1));
  WindowLoaderOptions val = options(WindowMode::pad, 16);
  val.split = "val";
  EXPECT_EQ(input_error_of([&] { WindowLoader(dir_, val); }), dir_.string() + " split 'val' has no documents");
}

}  // namespace
}  // namespace inkstone
