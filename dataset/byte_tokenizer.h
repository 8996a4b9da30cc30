// The byte-level tokenizer: id = byte value for all 256 bytes, then bos, eos, pad, mask at 256..259.
#pragma once
#include <array>

#include "dataset/tokenizer.h"

namespace inkstone {

class ByteTokenizer final : public Tokenizer {
 public:
  ByteTokenizer();

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids, bool keep_special = false) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override { return 256 + static_cast<int32_t>(special_names_.size()); }
  const SpecialTokens& specials() const override { return specials_; }
  bool is_special(int32_t id) const override { return id >= 256 && id < vocab_size(); }
  std::string kind() const override { return "byte"; }
  // A BPE model with the 256 byte-level characters as vocabulary and no merges: a Hugging Face loader reads it
  // and encodes to the same ids (invalid UTF-8 aside, which its string API cannot take).
  nlohmann::json to_json() const override;

  // True when `document` is exactly what to_json() writes, so load_tokenizer can give back a ByteTokenizer.
  static bool is_byte_tokenizer_document(const nlohmann::json& document);

 private:
  SpecialTokens specials_;
  std::array<std::string, 4> special_names_;  // Texts of ids 256..259.
};

}  // namespace inkstone
