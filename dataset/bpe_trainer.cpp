#include "dataset/bpe_trainer.h"

#include <chrono>
#include <fstream>
#include <queue>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "dataset/tokenizer.h"

namespace inkstone {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadBlockBytes = size_t{8} << 20;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t left_of(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t right_of(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

// Where a block may be cut without changing the split: after a newline that is followed by an ASCII letter,
// no pre-token of the GPT-2 or GPT-4 patterns spans the cut. Returns 0 when there is none.
size_t safe_cut(std::string_view text) {
  for (size_t pos = text.size(); pos-- > 1;) {
    const char c = text[pos];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter && text[pos - 1] == '\n') return pos;
  }
  return 0;
}

struct HeapEntry {
  int64_t count;
  uint64_t pair;
  // Max-heap on count; among equal counts the smaller pair (left id, then right id) comes out first.
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

void count_words(std::string_view text, const PreTokenizer& splitter, WordCounts& counts) {
  std::vector<std::string_view> pieces;
  splitter.split(text, pieces);
  for (std::string_view piece : pieces) ++counts[std::string(piece)];
}

BpeVocabulary learn_bpe(const WordCounts& word_counts, size_t target_tokens) {
  BpeVocabulary vocabulary;
  std::unordered_map<std::string, int32_t> id_of_bytes;
  for (int b = 0; b < 256; ++b) {
    vocabulary.tokens.emplace_back(1, static_cast<char>(b));
    id_of_bytes.emplace(vocabulary.tokens.back(), b);
  }

  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  words.reserve(word_counts.size());
  for (const auto& [text, count] : word_counts) {
    if (text.size() < 2) continue;  // No pair inside.
    words.emplace_back(text.begin(), text.end());
    for (int32_t& id : words.back()) id = static_cast<uint8_t>(id);
    counts.push_back(count);
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> words_of_pair;
  for (size_t w = 0; w < words.size(); ++w) {
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t key = pair_key(words[w][i], words[w][i + 1]);
      pair_count[key] += counts[w];
      auto& list = words_of_pair[key];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(static_cast<int32_t>(w));
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  std::vector<int32_t> merged_word;
  std::vector<uint64_t> new_pairs;
  while (vocabulary.tokens.size() < target_tokens && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const int64_t current = pair_count[top.pair];
    if (current != top.count) {  // Stale: the pair lost occurrences since this entry was pushed.
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current <= 0) continue;

    const int32_t left = left_of(top.pair), right = right_of(top.pair);
    std::string bytes = vocabulary.tokens[left] + vocabulary.tokens[right];
    auto [found, inserted] = id_of_bytes.emplace(bytes, static_cast<int32_t>(vocabulary.tokens.size()));
    const int32_t merged = found->second;
    if (inserted) vocabulary.tokens.push_back(std::move(bytes));
    vocabulary.merges.push_back({left, right, merged});

    // Rewrite every word holding the pair: its old pairs leave the counts and its new pairs join them.
    std::vector<int32_t> holders = std::move(words_of_pair[top.pair]);
    words_of_pair.erase(top.pair);
    new_pairs.clear();
    for (int32_t w : holders) {
      std::vector<int32_t>& word = words[w];
      merged_word.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged_word.push_back(merged);
          ++i;
        } else {
          merged_word.push_back(word[i]);
        }
      }
      if (merged_word.size() == word.size()) continue;  // A stale index entry: the pair went earlier.
      const int64_t count = counts[w];
      for (size_t i = 0; i + 1 < word.size(); ++i) pair_count[pair_key(word[i], word[i + 1])] -= count;
      for (size_t i = 0; i + 1 < merged_word.size(); ++i) {
        const uint64_t key = pair_key(merged_word[i], merged_word[i + 1]);
        pair_count[key] += count;
        if (merged_word[i] == merged || merged_word[i + 1] == merged) {
          auto& list = words_of_pair[key];
          if (list.empty() || list.back() != w) list.push_back(w);
          new_pairs.push_back(key);
        }
      }
      word.swap(merged_word);
    }
    // Only pairs with the new token gained occurrences; all others only lost some and are fixed lazily.
    std::sort(new_pairs.begin(), new_pairs.end());
    new_pairs.erase(std::unique(new_pairs.begin(), new_pairs.end()), new_pairs.end());
    for (uint64_t key : new_pairs) heap.push({pair_count[key], key});
  }
  return vocabulary;
}

nlohmann::json bpe_document(const BpeVocabulary& vocabulary, const std::vector<std::string>& extra_specials) {
  using nlohmann::json;
  json vocab = json::object();
  for (size_t id = 0; id < vocabulary.tokens.size(); ++id) vocab[to_byte_level(vocabulary.tokens[id])] = id;
  json merges = json::array();
  for (const LearnedMerge& m : vocabulary.merges) {
    merges.push_back(to_byte_level(vocabulary.tokens[m.left]) + " " + to_byte_level(vocabulary.tokens[m.right]));
  }
  const SpecialTokenNames names;
  std::vector<std::string> specials = {names.bos, names.eos, names.pad, names.mask};
  specials.insert(specials.end(), extra_specials.begin(), extra_specials.end());
  return byte_level_bpe_document(std::move(vocab), std::move(merges), specials,
                                 static_cast<int64_t>(vocabulary.tokens.size()), /*split_regex=*/true);
}

BpeTrainResult train_bpe(const std::vector<std::filesystem::path>& files, int32_t vocab_size,
                         const std::vector<std::string>& extra_specials) {
  const int32_t specials = 4 + static_cast<int32_t>(extra_specials.size());
  if (vocab_size < 256 + specials) {
    throw InputError(fmt::format("vocab size {} is below the 256 bytes plus {} special tokens", vocab_size,
                                 specials));
  }
  BpeTrainResult result;
  const PreTokenizer splitter(kGpt2SplitPattern);
  WordCounts words;
  const auto count_start = Clock::now();
  std::string buffer;
  for (const auto& file : files) {
    std::ifstream in = open_input_file(file, "training input");
    buffer.clear();
    while (true) {
      const size_t kept = buffer.size();
      buffer.resize(kept + kReadBlockBytes);
      in.read(buffer.data() + kept, static_cast<std::streamsize>(kReadBlockBytes));
      buffer.resize(kept + static_cast<size_t>(in.gcount()));
      result.corpus_bytes += in.gcount();
      if (in.bad()) throw InputError(fmt::format("training input '{}' cannot be read", file.string()));
      if (!in) break;
      // Count up to a cut that splits no pre-token; the rest waits for the next block.
      const size_t cut = safe_cut(buffer);
      if (cut == 0) continue;
      count_words(std::string_view(buffer).substr(0, cut), splitter, words);
      buffer.erase(0, cut);
    }
    count_words(buffer, splitter, words);
  }
  const auto merge_start = Clock::now();
  const BpeVocabulary vocabulary = learn_bpe(words, static_cast<size_t>(vocab_size - specials));
  result.count_seconds = std::chrono::duration<double>(merge_start - count_start).count();
  result.merge_seconds = std::chrono::duration<double>(Clock::now() - merge_start).count();
  result.distinct_words = words.size();
  result.tokenizer = std::make_unique<BpeTokenizer>(bpe_document(vocabulary, extra_specials), "train_bpe");
  return result;
}

}  // namespace inkstone
