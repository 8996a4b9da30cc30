// Hugging Face decoders: how the texts of a list of tokens become the decoded text.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace inkstone {

// The byte a byte-fallback token such as "<0x0A>" stands for (hex digits of either case), or -1 for other text.
int byte_fallback_value(std::string_view token);

// One decoder step: rewrites the list of token texts (Hugging Face's decode_chain).
class DecoderStep {
 public:
  virtual ~DecoderStep() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// The "decoder" of a tokenizer.json, applied to the texts of the ids (vocabulary text, or an added token's
// content), then concatenated:
// - ByteLevel: GPT-2's alphabet back to bytes; a token with a character outside the alphabet is kept as it is.
//   Caveat: the bytes are returned as they are, where Hugging Face replaces invalid UTF-8 by U+FFFD, so any byte
//   string survives encode then decode.
// - Metaspace: the replacement becomes a space, except in the first token, where it is dropped unless the
//   prepend scheme is "never".
// - Replace, ByteFallback (runs of <0xAB> tokens become their bytes, or one U+FFFD per token when the run is not
//   valid UTF-8), Fuse, Strip {content, start, stop}, and a Sequence of these.
// - null: the texts joined by single spaces, as Hugging Face does without a decoder.
// Other types (WordPiece, BPEDecoder, CTC) are refused by name.
class TokenizerDecoder {
 public:
  explicit TokenizerDecoder(const nlohmann::json& spec);  // Throws InputError naming an unsupported type.
  ~TokenizerDecoder();
  TokenizerDecoder(TokenizerDecoder&&) noexcept;
  TokenizerDecoder& operator=(TokenizerDecoder&&) noexcept;

  std::string decode(std::vector<std::string> tokens) const;

 private:
  void add_step(const nlohmann::json& step);

  std::vector<std::unique_ptr<DecoderStep>> steps_;
  bool join_with_spaces_ = false;
};

}  // namespace inkstone
