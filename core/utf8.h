// UTF-8 for text that may hold invalid bytes: find the valid runs, read and write code points.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace inkstone {

// Length of the valid UTF-8 sequence starting at text[pos], or 0 when the byte there does not start one
// (overlong forms, surrogates and code points above U+10FFFF are invalid, as in PCRE2 and Rust).
size_t utf8_sequence_length(std::string_view text, size_t pos);

// The code point of the valid sequence of `length` bytes at text[pos].
char32_t utf8_code_point(std::string_view text, size_t pos, size_t length);

void append_utf8(std::string& out, char32_t code_point);

// Unicode's White_Space property (Rust's char::is_whitespace, which Hugging Face's Strip uses).
bool is_unicode_whitespace(char32_t code_point);

// `text` with every byte that starts no valid sequence replaced by U+FFFD, for logs and viewers that need valid
// UTF-8 (a byte-level model's sample can end mid-character).
std::string valid_utf8(std::string_view text);

// Walks `text` in order: on_valid(run) for each maximal non-empty valid UTF-8 run, on_invalid(byte) for each byte
// that starts no valid sequence (both as views into `text`).
template <typename OnValid, typename OnInvalid>
void for_each_utf8_run(std::string_view text, OnValid&& on_valid, OnInvalid&& on_invalid) {
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length > 0) {
      pos += length;
      continue;
    }
    if (pos > run_start) on_valid(text.substr(run_start, pos - run_start));
    on_invalid(text.substr(pos, 1));
    run_start = ++pos;
  }
  if (pos > run_start) on_valid(text.substr(run_start, pos - run_start));
}

// `text` with each maximal valid UTF-8 run replaced by transform(run) and every invalid byte kept as it is.
template <typename Transform>
std::string map_valid_runs(std::string_view text, Transform&& transform) {
  std::string out;
  out.reserve(text.size());
  for_each_utf8_run(
      text, [&](std::string_view run) { out += transform(run); }, [&](std::string_view byte) { out += byte; });
  return out;
}

}  // namespace inkstone
