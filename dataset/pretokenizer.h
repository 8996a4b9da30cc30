// Pre-tokenisation: the regex split into pre-tokens, GPT-2's byte <-> printable-char table, and the Hugging Face
// pre_tokenizer pipeline (ByteLevel, Split, Metaspace) built from a tokenizer.json.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

// PCRE2 needs the code unit width before its header; pcre2_code is only used through a pointer here.
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include "core/utf8.h"

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
// The same compiled regex serves the Replace normalizer and decoder with a Regex pattern (replace_all).
class PreTokenizer {
 public:
  explicit PreTokenizer(std::string pattern);  // Throws InputError naming the pattern when it does not compile.
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the pieces of `text` (views into it) to `pieces`; thread-safe.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  // `text` with every non-empty match replaced by `content`; invalid bytes are kept and never matched.
  std::string replace_all(std::string_view text, std::string_view content) const;
  const std::string& pattern() const { return pattern_; }

 private:
  // Calls on_match(start, end) for each non-empty match in the valid UTF-8 `run`, left to right.
  template <typename OnMatch>
  void for_each_match(std::string_view run, pcre2_match_data* match, OnMatch&& on_match) const;
  void split_valid(std::string_view run, pcre2_match_data* match, std::vector<std::string_view>& pieces) const;

  std::string pattern_;
  pcre2_code* code_ = nullptr;
};

// One step of a pre_tokenizer: cuts or rewrites a piece into pieces. Rewritten text is kept in `storage`, whose
// elements never move, so the views stay valid while it lives.
class PreTokenizerStep {
 public:
  virtual ~PreTokenizerStep() = default;
  // Appends the pieces of `piece` to `out`; `at_text_start` is true for the piece that begins the encoded text.
  virtual void apply(std::string_view piece, bool at_text_start, std::vector<std::string_view>& out,
                     std::deque<std::string>& storage) const = 0;
};

// The pre_tokenizer of a tokenizer.json: null (the segment is one piece), ByteLevel, Split (Regex pattern, behavior
// Isolated), Metaspace, or a Sequence of these, each step applied to every piece the one before made.
// ByteLevel must come last: it marks the pieces as bytes for the byte-level model (byte_level()), which maps
// them to GPT-2's alphabet itself. Other types (Whitespace, Digits, BertPreTokenizer, ...) are refused by name.
class PreTokenizerPipeline {
 public:
  // Throws InputError naming an unsupported type or setting.
  explicit PreTokenizerPipeline(const nlohmann::json& spec);
  ~PreTokenizerPipeline();

  // True when a ByteLevel step is present: pieces are then raw bytes for a byte-level vocabulary.
  bool byte_level() const { return byte_level_; }
  // Appends the pieces of one normalized segment; `at_text_start` says the segment begins the encoded text
  // (Metaspace's prepend scheme "first" prepends only there). Thread-safe.
  void split(std::string_view segment, bool at_text_start, std::vector<std::string_view>& pieces,
             std::deque<std::string>& storage) const;

 private:
  void add_step(const nlohmann::json& step);

  std::vector<std::unique_ptr<PreTokenizerStep>> steps_;
  bool byte_level_ = false;
};

}  // namespace inkstone
