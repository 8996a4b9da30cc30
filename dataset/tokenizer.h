// The tokenizer interface shared by the byte tokenizer and the BPE tokenizers, and how to load one.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace inkstone {

// Reserved ids every tokenizer has; diffusion needs `mask`, batching needs `pad`.
struct SpecialTokens {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t pad = -1;
  int32_t mask = -1;
};

// The texts of the reserved specials in the tokenizers inkstone makes (the byte tokenizer, train_bpe); the same
// text for bos and eos makes one token serve both, as GPT-2's <|endoftext|> does.
struct SpecialTokenNames {
  std::string bos = "<|bos|>";
  std::string eos = "<|eos|>";
  std::string pad = "<|pad|>";
  std::string mask = "<|mask|>";
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text (any bytes, invalid UTF-8 included) to ids; no special tokens are added.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids back to bytes; special tokens are dropped unless keep_special.
  virtual std::string decode(const std::vector<int32_t>& ids, bool keep_special = false) const = 0;
  // The raw bytes one id stands for (the special's text for a special id).
  virtual std::string token_bytes(int32_t id) const = 0;
  // The id of the special (then any) token whose token_bytes are exactly `content`, e.g. "<|im_end|>"; nullopt
  // when there is none. The default scans the vocabulary.
  virtual std::optional<int32_t> token_id(std::string_view content) const;
  virtual int32_t vocab_size() const = 0;
  virtual const SpecialTokens& specials() const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // "byte" or "bpe".
  virtual std::string kind() const = 0;
  // The Hugging Face tokenizer.json document that reloads this tokenizer exactly.
  virtual nlohmann::json to_json() const = 0;
  // Bytes of text that encode() has left out so far because no token stands for them: a vocabulary without an unk
  // token or byte fallback drops the characters it lacks, as Hugging Face does (a byte-level vocabulary read with
  // `pre_tokenizer: null` drops spaces and non-ASCII text this way). `data prepare` reports them.
  virtual int64_t unrepresented_bytes() const { return 0; }

  // Stable hash of to_json(): shards and checkpoints record it to catch a mismatched tokenizer.
  std::string fingerprint() const;
  // Writes to_json() to `file` atomically.
  void save(const std::filesystem::path& file) const;
};

// A Hugging Face tokenizer.json document of a byte-level BPE model: `vocab` maps byte-level strings to ids,
// `merges` lists "left right" pairs, `specials` are added tokens from id `first_special_id` on. `split_regex`
// turns on the GPT-2 pre-tokenizer split (with trimmed offsets); the byte tokenizer, which has no merges, leaves
// it off.
nlohmann::json byte_level_bpe_document(nlohmann::json vocab, nlohmann::json merges,
                                       const std::vector<std::string>& specials, int64_t first_special_id,
                                       bool split_regex);

// "byte", a tokenizer.json file, or a folder holding tokenizer.json (a run, checkpoint or shard folder).
// Throws InputError naming the spec when it cannot be loaded.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);
std::unique_ptr<Tokenizer> tokenizer_from_json(const nlohmann::json& document, const std::string& origin);

}  // namespace inkstone
