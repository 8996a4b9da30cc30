// BPE tokenizers read from and written to the Hugging Face tokenizer.json format: byte-level BPE (GPT-2, Qwen2/3,
// Llama 3) and SentencePiece-style BPE with byte fallback (Llama 2, Mistral, TinyLlama).
#pragma once
#include <array>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "dataset/bpe_model.h"
#include "dataset/normalizer.h"
#include "dataset/pretokenizer.h"
#include "dataset/tokenizer.h"
#include "dataset/tokenizer_decoder.h"

namespace inkstone {

// Added tokens found by leftmost, then longest match, as Hugging Face's added vocabulary finds them.
class AddedTokenMatcher {
 public:
  struct Match {
    size_t start, end;
    int32_t id;
  };
  void add(const std::string& text, int32_t id);
  // The matches in `text`, left to right, not overlapping.
  std::vector<Match> find_all(std::string_view text) const;

 private:
  std::vector<std::pair<std::string, int32_t>> longest_first_;
  std::array<bool, 256> starts_match_{};
};

// What is read from a tokenizer.json, in the order encode applies it (anything unsupported is an InputError that
// names it, never skipped):
// - added_tokens: each a single id, matched first: those with normalized false in the raw text, then those with
//   normalized true, by their normalized content, in each normalized segment between.
//   Caveat: their lstrip / rstrip / single_word flags are kept on save but not applied when matching.
// - normalizer (dataset/normalizer.h): null, NFC / NFD / NFKC / NFKD, Lowercase, Replace, Prepend, Strip, Sequence;
//   applied to each segment between added tokens (so Prepend prefixes every such segment, as Hugging Face does).
// - pre_tokenizer (dataset/pretokenizer.h): null, ByteLevel, Split (Regex, Isolated), Metaspace, Sequence.
// - model (dataset/bpe_model.h): BPE, byte-level when the pre_tokenizer has ByteLevel, else over characters with
//   byte_fallback / unk_token / fuse_unk; ignore_merges is honoured.
// - decoder (dataset/tokenizer_decoder.h): ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence, null.
//   decode(ids, keep_special) is Hugging Face's decode(ids, skip_special_tokens = !keep_special), tokenizers 0.23:
//   a normalized added token is decoded from its normalized content, and an id is dropped as special when its
//   text is the content of a special added token. Caveat: ByteLevel keeps invalid UTF-8 bytes (see there).
// - post_processor, truncation and padding are kept on save and not applied (encode adds no special tokens).
// Reserved ids (bos / eos / pad / mask):
// - with a top-level "inkstone_special_roles": {"bos": TEXT | null, "eos": ..., "pad": ..., "mask": ...} (written
//   by the Hugging Face import from tokenizer_config.json), each role is the added token with that content and a
//   null or absent role is -1 (none); nothing is appended. The object survives to_json().
// - without it, they are found among the special added tokens by name (SpecialTokenNames, then
//   "<|begin_of_text|>" / "<s>" / "<|endoftext|>", "<|end_of_text|>" / "</s>" / "<|endoftext|>", "<pad>",
//   "<mask>"); a missing one is appended as an added special token with SpecialTokenNames' text, so the saved
//   file reloads to the same ids. GPT-2 thus gets bos = eos = 50256, pad = 50257, mask = 50258.
// Encoding is thread-safe; the BPE result of each short pre-token is cached (bounded).
class BpeTokenizer final : public Tokenizer {
 public:
  // Throws InputError prefixed with `origin` (a file name) when the document is not usable.
  BpeTokenizer(const nlohmann::json& document, const std::string& origin);
  ~BpeTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids, bool keep_special = false) const override;
  std::string token_bytes(int32_t id) const override;
  std::optional<int32_t> token_id(std::string_view content) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(added_index_.size()); }
  const SpecialTokens& specials() const override { return specials_; }
  bool is_special(int32_t id) const override;
  std::string kind() const override { return "bpe"; }
  int64_t unrepresented_bytes() const override;
  nlohmann::json to_json() const override;

  // The merges in rank order, as pairs of ids.
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return model_->merges(); }

 private:
  struct AddedToken {
    int32_t id;
    std::string content;
    bool special;
    bool normalized;
    nlohmann::json entry;  // As read (flags kept) for to_json.
  };

  void parse_added_tokens(const nlohmann::json& added);
  void add_token(AddedToken token);
  void assign_special_roles(const nlohmann::json& roles);
  void find_specials_by_name();
  void index_added_tokens();
  void encode_normalized(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids,
                         std::deque<std::string>& storage) const;
  void encode_pretokenized(std::string_view segment, bool at_text_start, std::vector<int32_t>& ids,
                           std::deque<std::string>& storage) const;
  // The text decode hands the decoder for an id (Hugging Face's id-to-token of decoding).
  std::string decode_text(int32_t id) const;
  const AddedToken* added_token(int32_t id) const;
  void check_id(int32_t id) const;

  nlohmann::json document_;  // Everything but model.vocab, model.merges and added_tokens, which to_json rebuilds.
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizerPipeline> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<TokenizerDecoder> decoder_;
  std::vector<AddedToken> added_;          // In the order read, then the appended specials.
  std::vector<int32_t> added_index_;       // By id: index into added_, or -1 for a model token.
  std::vector<bool> dropped_unless_kept_;  // By id: decode drops it unless keep_special.
  AddedTokenMatcher raw_matcher_;          // Added tokens with normalized false.
  AddedTokenMatcher normalized_matcher_;   // The others, by normalized content.
  SpecialTokens specials_;
};

}  // namespace inkstone
