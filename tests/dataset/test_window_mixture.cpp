// Data mixtures (docs/training.md, "Data mixtures"): every row is one source's own window for its (step, global
// row), sources are drawn by weight, the batch of a rank is its rows of the global batch, and rows of a folder
// without a loss mask are trained on in full beside a folder of conversations.
#include <algorithm>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "dataset/byte_tokenizer.h"
#include "dataset/data_prepare.h"
#include "dataset/window_mixture.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

// A folder of 40 byte-tokenised documents made of one letter each (fortune entries), or of prompt / response pairs.
fs::path prepare_folder(const fs::path& dir, const std::string& name, char letter, bool chat = false) {
  const auto input = dir / (name + ".in");
  std::ofstream out(input);
  for (int d = 0; d < 40; ++d) {
    const std::string text(static_cast<size_t>(5 + d % 7), letter);
    if (chat) out << "{\"prompt\": \"" << text << "\", \"response\": \"" << text << "\"}\n";
    else out << text << "\n%\n";
  }
  out.close();
  PrepareOptions options;
  options.inputs = {input};
  options.out_dir = dir / name;
  options.format = chat ? InputFormat::chat : InputFormat::fortune;
  options.val_fraction = 0.2;
  prepare_data(options, ByteTokenizer());
  return dir / name;
}

MixtureSource source(const fs::path& folder, double weight, int64_t rank = 0) {
  WindowLoaderOptions o;
  o.window_len = 16;
  o.seed = 11;
  o.rank = rank;
  o.split = "train";
  auto train = std::make_shared<WindowLoader>(folder, o);
  o.split = "val";
  auto val = std::make_shared<WindowLoader>(folder, o);
  return {folder.filename().string(), weight, train, val};
}

std::vector<int32_t> row_of(const TokenBatch& batch, int64_t row) {
  const auto first = batch.tokens.begin() + row * batch.cols;
  return {first, first + batch.cols};
}

TEST(WindowMixture, RowsAreTheirSourcesOwnWindowsDrawnByWeight) {
  const auto dir = testing::temp_dir("window_mixture");
  const auto a = prepare_folder(dir, "a", 'a'), b = prepare_folder(dir, "b", 'b');
  const WindowMixture mixture({source(a, 3.0), source(b, 1.0)});
  int64_t from_a = 0, rows = 0;
  for (int64_t step = 0; step < 250; ++step) {
    const TokenBatch batch = mixture.train_batch(step, 16);
    EXPECT_EQ(row_of(batch, 0), row_of(mixture.train_batch(step, 16), 0));  // a pure function of the step
    for (int64_t row = 0; row < 16; ++row) {
      const size_t which = mixture.source_of(step, row);
      TokenBatch own = mixture.sources()[which].train->empty_batch(1);
      mixture.sources()[which].train->fill_train_row(own, 0, step, row);
      ASSERT_EQ(row_of(batch, row), row_of(own, 0)) << "step " << step << " row " << row;
      from_a += which == 0;
      ++rows;
    }
  }
  // 4,000 rows at p = 3/4: the share of a lies within 5 standard deviations (0.034) of 0.75.
  const double share = static_cast<double>(from_a) / static_cast<double>(rows);
  EXPECT_NEAR(share, 0.75, 5 * std::sqrt(0.75 * 0.25 / static_cast<double>(rows)));
}

TEST(WindowMixture, ARanksBatchIsItsRowsOfTheGlobalBatch) {
  const auto dir = testing::temp_dir("window_mixture_ranks");
  const auto a = prepare_folder(dir, "a", 'a'), b = prepare_folder(dir, "b", 'b');
  const WindowMixture whole({source(a, 1.0), source(b, 1.0)});
  const WindowMixture second({source(a, 1.0, 1), source(b, 1.0, 1)});
  for (int64_t step = 0; step < 5; ++step) {
    const TokenBatch all = whole.train_batch(step, 8), half = second.train_batch(step, 4);
    for (int64_t row = 0; row < 4; ++row) EXPECT_EQ(row_of(half, row), row_of(all, 4 + row));
  }
}

TEST(WindowMixture, RowsOfAFolderWithoutLossMaskAreTrainedInFull) {
  const auto dir = testing::temp_dir("window_mixture_masks");
  const auto text = prepare_folder(dir, "text", 'a'), chat = prepare_folder(dir, "chat", 'b', /*chat=*/true);
  const WindowMixture mixture({source(text, 1.0), source(chat, 1.0)});
  const TokenBatch batch = mixture.train_batch(3, 32);
  ASSERT_EQ(batch.trained.size(), batch.tokens.size());
  ASSERT_EQ(batch.conversations.size(), 32u);
  bool saw_text = false, saw_prompt = false;
  for (int64_t row = 0; row < 32; ++row) {
    const auto at = [&](int64_t col) { return static_cast<size_t>(row * batch.cols + col); };
    // Whole rows come from one folder: the row of a conversation is flagged as one, the row of text is not.
    const bool text_row = std::find(batch.tokens.begin() + at(0), batch.tokens.begin() + at(batch.cols), 'a') !=
                          batch.tokens.begin() + at(batch.cols);
    EXPECT_EQ(batch.conversations[static_cast<size_t>(row)], text_row ? 0 : 1) << "row " << row;
    for (int64_t col = 0; col < batch.cols; ++col) {
      if (batch.tokens[at(col)] == 'a') {
        EXPECT_EQ(batch.trained[at(col)], 1);
        saw_text = true;
      }
      if (batch.tokens[at(col)] == 'b' && batch.trained[at(col)] == 0) saw_prompt = true;
    }
  }
  EXPECT_TRUE(saw_text);
  EXPECT_TRUE(saw_prompt);  // a conversation's prompt stays untrained
}

}  // namespace
}  // namespace inkstone
