// The BPE trainer: incremental merges agree with a naive recount, and a trained tokenizer survives save/reload.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>

#include "dataset/bpe_trainer.h"
#include "dataset/tokenizer.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

// Words from a few syllables with Zipf-like frequencies, spaces and newlines: many ties and repeated pairs.
std::string generated_corpus(size_t words, uint32_t seed) {
  const std::vector<std::string> syllables = {"ka", "lo", "mi", "ne", "ru", "the", "ing", "ab", "ba", "aa", "7", "42"};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> length(1, 4);
  std::geometric_distribution<size_t> pick(0.25);
  std::string text;
  for (size_t w = 0; w < words; ++w) {
    const size_t n = length(rng);
    for (size_t k = 0; k < n; ++k) text += syllables[std::min(pick(rng), syllables.size() - 1)];
    text += (w % 13 == 12) ? ".\n" : (w % 29 == 0 ? "  " : " ");
  }
  return text;
}

// The oracle: recount every pair over every word before each merge.
std::vector<std::pair<std::string, std::string>> naive_merges(const WordCounts& counts, size_t target_tokens) {
  std::vector<std::string> tokens;
  std::map<std::string, int32_t> id_of;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    id_of[tokens.back()] = b;
  }
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [text, count] : counts) {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(static_cast<uint8_t>(c));
    words.emplace_back(ids, count);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (tokens.size() < target_tokens) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;  // Ordered: the first of the top count wins ties.
    for (const auto& [ids, count] : words) {
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += count;
    }
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto [left, right] = best->first;
    const std::string bytes = tokens[left] + tokens[right];
    if (!id_of.count(bytes)) {
      id_of[bytes] = static_cast<int32_t>(tokens.size());
      tokens.push_back(bytes);
    }
    const int32_t merged = id_of[bytes];
    merges.emplace_back(tokens[left], tokens[right]);
    for (auto& [ids, count] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids.swap(out);
    }
  }
  return merges;
}

TEST(BpeTrainer, IncrementalMergesEqualNaiveRecount) {
  const PreTokenizer splitter(kGpt2SplitPattern);
  WordCounts counts;
  count_words(generated_corpus(3000, 1), splitter, counts);
  const size_t target = 256 + 120;
  const BpeVocabulary learnt = learn_bpe(counts, target);
  std::vector<std::pair<std::string, std::string>> incremental;
  for (const LearnedMerge& m : learnt.merges) incremental.emplace_back(learnt.tokens[m.left], learnt.tokens[m.right]);
  const auto naive = naive_merges(counts, target);
  ASSERT_GT(naive.size(), 100u);
  EXPECT_EQ(incremental, naive);
  EXPECT_EQ(learnt.tokens.size(), target);
}

TEST(BpeTrainer, TrainedTokenizerSavesReloadsAndRoundTrips) {
  const auto dir = testing::temp_dir("bpe_train");
  const std::string corpus = generated_corpus(20000, 2);
  std::ofstream(dir / "corpus.txt", std::ios::binary) << corpus;
  const BpeTrainResult trained = train_bpe({dir / "corpus.txt"}, 400, {"<|im_start|>"});
  const Tokenizer& tokenizer = *trained.tokenizer;
  EXPECT_EQ(tokenizer.vocab_size(), 400);
  EXPECT_EQ(trained.corpus_bytes, static_cast<int64_t>(corpus.size()));
  EXPECT_EQ(tokenizer.specials().bos, 395);
  EXPECT_EQ(tokenizer.specials().mask, 398);

  tokenizer.save(dir / "tokenizer.json");
  const auto reloaded = load_tokenizer(dir.string());
  EXPECT_EQ(reloaded->to_json(), tokenizer.to_json());
  const auto ids = tokenizer.encode(corpus);
  EXPECT_LT(ids.size(), corpus.size() / 2);  // The merges compress this repetitive text well.
  EXPECT_EQ(reloaded->encode(corpus), ids);
  EXPECT_EQ(reloaded->decode(ids), corpus);
  const std::string text = "kalo<|im_start|>mi \xFF\xFE weird \xE2\x82 bytes";
  const auto with_special = reloaded->encode(text);
  EXPECT_EQ(std::count(with_special.begin(), with_special.end(), 399), 1);
  EXPECT_EQ(reloaded->decode(with_special, /*keep_special=*/true), text);
}

}  // namespace
}  // namespace inkstone
