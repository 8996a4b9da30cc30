// Byte-level BPE (GPT-2 style) read from and written to the Hugging Face tokenizer.json format.
#pragma once
#include <array>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/pretokenizer.h"
#include "core/tokenizer.h"

namespace inkstone {

// What is read from a tokenizer.json:
// - model: type BPE with vocab and merges, merges as "a b" strings or [a, b] lists; ignore_merges is honoured.
//   byte_fallback, continuing_subword_prefix and end_of_word_suffix are refused (not byte-level BPE).
// - pre_tokenizer: ByteLevel (GPT-2 regex when use_regex, optional add_prefix_space), or a Sequence of
//   Split(Regex, behavior Isolated) steps and ByteLevel(use_regex = false), as GPT-4 style files have.
// - added_tokens: matched in the text before pre-tokenisation (leftmost, then longest), each a single id.
//   Caveat: their lstrip / rstrip / single_word flags are kept on save but not applied when matching.
// - normalizer: null or NFC. Caveat: NFC is treated as identity, exact for text that is already NFC (most is).
// - decoder: null or ByteLevel. post_processor, truncation and padding are kept on save and not applied
//   (encode adds no special tokens).
// Reserved ids: bos / eos / pad / mask are found among the special added tokens by name (SpecialTokenNames,
// then "<|begin_of_text|>" / "<s>" / "<|endoftext|>", "<|end_of_text|>" / "</s>" / "<|endoftext|>", "<pad>",
// "<mask>"); a missing one is appended as an added special token with SpecialTokenNames' text, so the saved
// file reloads to the same ids. GPT-2 thus gets bos = eos = 50256, pad = 50257, mask = 50258.
// Encoding is thread-safe; the BPE result of each short pre-token is cached (bounded).
class BpeTokenizer final : public Tokenizer {
 public:
  // Throws InputError prefixed with `origin` (a file name) when the document is not usable.
  BpeTokenizer(const nlohmann::json& document, const std::string& origin);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids, bool keep_special = false) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  const SpecialTokens& specials() const override { return specials_; }
  bool is_special(int32_t id) const override;
  std::string kind() const override { return "bpe"; }
  nlohmann::json to_json() const override;

  // The merges in rank order, as pairs of ids.
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special;
  };

  void parse_model(const nlohmann::json& model);
  void parse_added_tokens(const nlohmann::json& added);
  void parse_pre_tokenizer(const nlohmann::json& pre_tokenizer);
  void reserve_specials();
  void encode_segment(std::string_view segment, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_piece(std::string_view piece, std::vector<int32_t>& out) const;
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::string origin_;
  nlohmann::json document_;  // Everything but model.vocab, model.merges and added_tokens, which to_json rebuilds.
  int32_t model_vocab_size_ = 0;
  std::vector<std::string> tokens_;  // Raw bytes (an added token's text) by id.
  std::vector<bool> special_;
  std::vector<AddedToken> added_;  // Longest first, for matching.
  std::vector<nlohmann::json> added_entries_;  // As read (flags kept), by id order.
  std::array<int32_t, 256> byte_id_{};
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, Merge> merge_of_pair_;
  std::unordered_map<std::string, int32_t> id_of_bytes_;  // Only filled when ignore_merges.
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  std::vector<std::unique_ptr<PreTokenizer>> splits_;  // Applied in order, each to the previous one's pieces.
  std::array<bool, 256> starts_added_token_{};
  SpecialTokens specials_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace inkstone
