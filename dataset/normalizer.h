// Hugging Face normalizers: how the text between added tokens is rewritten before pre-tokenisation.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataset/pretokenizer.h"

namespace inkstone {

// Hugging Face's Replace, shared by the normalizer and the decoder of that name: every non-overlapping match of
// the pattern, left to right, becomes `content`. The pattern is {"String": s} (literal; an empty one matches
// nothing) or {"Regex": r} (PCRE2, in place of the Oniguruma syntax Hugging Face compiles).
class TextReplace {
 public:
  explicit TextReplace(const nlohmann::json& spec);  // Throws InputError on a malformed pattern.
  std::string apply(std::string_view text) const;

 private:
  std::string literal_;
  std::unique_ptr<PreTokenizer> regex_;
  std::string content_;
};

// One normalizer step; text is any bytes, and only its valid UTF-8 is rewritten.
class NormalizerStep {
 public:
  virtual ~NormalizerStep() = default;
  virtual std::string apply(std::string_view text) const = 0;
};

// The "normalizer" of a tokenizer.json: null, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Replace, Prepend, Strip,
// or a Sequence of these, applied in order. Invalid UTF-8 bytes pass through every step unchanged. Any other type
// (BertNormalizer, Precompiled, StripAccents, Nmt, ...) is refused by name.
// Caveats: the Unicode tables are utf8proc's, Hugging Face's are Rust's (equal for characters both versions know);
// a Regex pattern that can match the empty string inserts nothing here.
class Normalizer {
 public:
  explicit Normalizer(const nlohmann::json& spec);  // Throws InputError naming an unsupported type.
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  std::string normalize(std::string_view text) const;
  bool is_identity() const { return steps_.empty(); }

 private:
  void add_step(const nlohmann::json& step);

  std::vector<std::unique_ptr<NormalizerStep>> steps_;
};

}  // namespace inkstone
