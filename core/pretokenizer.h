// Pre-tokenisation for byte-level BPE: the regex split into pre-tokens and GPT-2's byte <-> printable-char table.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// PCRE2 needs the code unit width before its header; pcre2_code is only used through a pointer here.
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

namespace inkstone {

// GPT-2's split regex (also the Hugging Face ByteLevel pre-tokenizer's with use_regex = true).
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's byte-level alphabet: every byte stands for one printable code point, so a vocabulary of byte strings
// can be written as JSON text. Bytes 33-126, 161-172 and 174-255 stand for themselves; the other 68 for
// U+0100 upwards, in byte order. Returns the UTF-8 text of that code point.
const std::string& byte_level_char(uint8_t byte);
// Raw bytes -> their byte-level text (the form tokens have in a tokenizer.json vocabulary).
std::string to_byte_level(std::string_view bytes);
// Byte-level text -> raw bytes; nullopt when a character is outside the alphabet.
std::optional<std::string> from_byte_level(std::string_view text);

// Splits text into pre-tokens with a PCRE2 regex in UTF + UCP mode (JIT-compiled when available).
// Matches and the gaps between them are both pieces (Hugging Face's Split behaviour "Isolated").
// Invalid UTF-8 never reaches PCRE2: the text is cut into valid runs, each split by the regex, and every
// invalid byte becomes a piece of its own. Caveat: PCRE2's \s lacks U+0085 (NEL), which Oniguruma's has.
class PreTokenizer {
 public:
  explicit PreTokenizer(std::string pattern);  // Throws InputError naming the pattern when it does not compile.
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (views into it) to `pieces`; thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  const std::string& pattern() const { return pattern_; }

 private:
  void split_valid(std::string_view run, pcre2_match_data* match, std::vector<std::string_view>& pieces) const;

  std::string pattern_;
  pcre2_code* code_ = nullptr;
};

// Length of the valid UTF-8 sequence starting at text[pos], or 0 when the byte there does not start one
// (overlong forms, surrogates and code points above U+10FFFF are invalid, as in PCRE2).
size_t utf8_sequence_length(std::string_view text, size_t pos);

}  // namespace inkstone
