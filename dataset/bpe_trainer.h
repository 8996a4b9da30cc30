// Learns byte-level BPE merges from a corpus (Sennrich et al. 2016, on bytes as in GPT-2, Radford et al. 2019).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dataset/bpe_tokenizer.h"

namespace inkstone {

// How often each pre-token (a "word", raw bytes) occurs in a corpus.
using WordCounts = std::unordered_map<std::string, int64_t>;

// Adds the pre-tokens of `text`, split by `splitter`, to `counts`.
void count_words(std::string_view text, const PreTokenizer& splitter, WordCounts& counts);

struct LearnedMerge {
  int32_t left, right, merged;
};
struct BpeVocabulary {
  std::vector<std::string> tokens;  // Raw bytes by id; ids 0..255 are the bytes themselves.
  std::vector<LearnedMerge> merges;  // In rank order.
};

// Grows the 256-byte alphabet until it has `target_tokens` tokens or no adjacent pair is left. Each step merges
// the most frequent adjacent pair over all words (ties: smaller left id, then smaller right id), left to right
// without overlap inside a word. Pair counts are updated incrementally, only for the words that hold the merged
// pair (an index pair -> words), and the next pair comes from a max-heap whose stale entries are re-pushed
// with their current count when popped. A merge whose bytes equal an existing token reuses its id.
BpeVocabulary learn_bpe(const WordCounts& words, size_t target_tokens);

// The tokenizer.json (GPT-2 regex, ByteLevel decoder) for `vocabulary`, with bos / eos / pad / mask
// (SpecialTokenNames) and then `extra_specials` appended as special added tokens.
nlohmann::json bpe_document(const BpeVocabulary& vocabulary, const std::vector<std::string>& extra_specials = {});

struct BpeTrainResult {
  std::unique_ptr<BpeTokenizer> tokenizer;
  int64_t corpus_bytes = 0;
  size_t distinct_words = 0;
  double count_seconds = 0;
  double merge_seconds = 0;
};

// Trains a tokenizer of `vocab_size` ids in all (specials included) on the files, read in blocks.
// Throws InputError naming a file that cannot be read, or a vocab_size too small for bytes and specials.
BpeTrainResult train_bpe(const std::vector<std::filesystem::path>& files, int32_t vocab_size,
                         const std::vector<std::string>& extra_specials = {});

}  // namespace inkstone
