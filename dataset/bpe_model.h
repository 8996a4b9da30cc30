// The BPE model of a tokenizer.json: vocabulary and merges, and how one pre-token becomes ids.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace inkstone {

// How a word becomes the symbols the merges start from (byte-level or characters, see BpeModel).
class InitialSymbols {
 public:
  virtual ~InitialSymbols() = default;
  // Appends the word's symbols; returns how many of its bytes no symbol stands for (left out).
  virtual int64_t split(std::string_view word, std::vector<int32_t>& symbols) const = 0;
};

// Model type BPE. Merges apply lowest rank first, leftmost first among equal ranks, as Hugging Face's do, to
// initial symbols that depend on the alphabet:
// - byte-level (GPT-2, Qwen, Llama 3: the pre_tokenizer has a ByteLevel step): the word's bytes, each the
//   vocabulary entry of its GPT-2 alphabet character; all 256 must be in the vocabulary.
// - characters (Llama 2, Mistral, TinyLlama): the word's UTF-8 characters. A character missing from the
//   vocabulary becomes the <0xAB> tokens of its bytes when byte_fallback (if all of them exist), else the
//   unk_token (a run of them one unk when fuse_unk), else nothing, as Hugging Face does. An invalid byte is a
//   character that is never in the vocabulary.
// ignore_merges is honoured; continuing_subword_prefix and end_of_word_suffix are refused.
// Thread-safe; the ids of each short word are cached (bounded).
class BpeModel {
 public:
  // Throws InputError when the model object is not usable.
  BpeModel(const nlohmann::json& model, bool byte_level);
  ~BpeModel();

  // Appends the ids of one pre-token.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Bytes of text that encode_word has left out so far because no token stands for them (characters without a
  // vocabulary entry, byte fallback or unk token).
  int64_t unrepresented_bytes() const { return unrepresented_bytes_.load(); }
  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  // An id's vocabulary text as the tokenizer.json writes it ("Ġthe", "▁the", "<0x0A>").
  const std::string& text(int32_t id) const { return texts_[id]; }
  // The raw bytes an id stands for: byte-level text decoded, a <0xAB> token's byte, else the text itself.
  std::string bytes(int32_t id) const;
  // The merges in rank order, as pairs of ids.
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  // Sets model["vocab"] and model["merges"] (as "a b" strings unless a text holds a space).
  void write_vocab_and_merges(nlohmann::json& model) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  std::unordered_map<std::string, int32_t> parse_vocab(const nlohmann::json& vocab);
  void parse_merges(const nlohmann::json& merges, const std::unordered_map<std::string, int32_t>& id_of_text);
  void index_whole_words();
  void merge_symbols(const std::vector<int32_t>& symbols, std::vector<int32_t>& out) const;
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  bool byte_level_;
  std::vector<std::string> texts_;
  std::unique_ptr<InitialSymbols> initial_symbols_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, Merge> merge_of_pair_;
  std::unordered_map<std::string, int32_t> id_of_word_;  // By raw word; only filled when ignore_merges.

  mutable std::mutex cache_mutex_;
  mutable std::atomic<int64_t> unrepresented_bytes_{0};  // words that lose bytes are never cached, so each counts
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace inkstone
