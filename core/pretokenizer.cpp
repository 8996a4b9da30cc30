#include "core/pretokenizer.h"

#include <array>

#include <fmt/format.h>

#include "core/errors.h"

namespace inkstone {
namespace {

struct ByteLevelTable {
  std::array<std::string, 256> char_of_byte;
  // Code points used by the alphabet are below U+0144; index by code point.
  std::array<int16_t, 512> byte_of_code_point;

  ByteLevelTable() {
    byte_of_code_point.fill(-1);
    int next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const int code_point = printable ? b : next_extra++;
      byte_of_code_point[code_point] = static_cast<int16_t>(b);
      std::string& s = char_of_byte[b];
      if (code_point < 0x80) {
        s.push_back(static_cast<char>(code_point));
      } else {
        s.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
        s.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
      }
    }
  }
};

const ByteLevelTable& table() {
  static const ByteLevelTable instance;
  return instance;
}

}  // namespace

const std::string& byte_level_char(uint8_t byte) { return table().char_of_byte[byte]; }

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_level_char(static_cast<uint8_t>(c));
  return out;
}

std::optional<std::string> from_byte_level(std::string_view text) {
  const auto& t = table();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c0 = static_cast<uint8_t>(text[i]);
    int code_point = -1;
    if (c0 < 0x80) {
      code_point = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size()) {
      code_point = ((c0 & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // Three- and four-byte characters are all outside the alphabet.
    }
    if (code_point >= static_cast<int>(t.byte_of_code_point.size()) || t.byte_of_code_point[code_point] < 0) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(t.byte_of_code_point[code_point]));
  }
  return out;
}

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  auto at = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t c0 = at(pos);
  if (c0 < 0x80) return 1;
  size_t length = 0;
  uint32_t min_code_point = 0;
  uint32_t code_point = 0;
  if ((c0 & 0xE0) == 0xC0) {
    length = 2, min_code_point = 0x80, code_point = c0 & 0x1F;
  } else if ((c0 & 0xF0) == 0xE0) {
    length = 3, min_code_point = 0x800, code_point = c0 & 0x0F;
  } else if ((c0 & 0xF8) == 0xF0) {
    length = 4, min_code_point = 0x10000, code_point = c0 & 0x07;
  } else {
    return 0;
  }
  if (pos + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    const uint8_t c = at(pos + k);
    if ((c & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (c & 0x3F);
  }
  if (code_point < min_code_point || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return 0;
  }
  return length;
}

PreTokenizer::PreTokenizer(std::string pattern) : pattern_(std::move(pattern)) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &error_offset, nullptr);
  if (!code_) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    throw InputError(fmt::format("split regex '{}' does not compile at offset {}: {}", pattern_, error_offset,
                                 reinterpret_cast<const char*>(message.data())));
  }
  // JIT is an optimisation only: without it (no JIT support on this CPU or build) the interpreter runs.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(code_); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
  size_t run_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length > 0) {
      pos += length;
      continue;
    }
    split_valid(text.substr(run_start, pos - run_start), match, pieces);
    pieces.push_back(text.substr(pos, 1));
    run_start = ++pos;
  }
  split_valid(text.substr(run_start), match, pieces);
  pcre2_match_data_free(match);
}

void PreTokenizer::split_valid(std::string_view run, pcre2_match_data* match,
                               std::vector<std::string_view>& pieces) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
  size_t gap_start = 0;
  size_t offset = 0;
  while (offset < run.size()) {
    // The run was validated above, so PCRE2 need not re-check it on every call (that would be quadratic).
    const int found = pcre2_match(code_, subject, run.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (found < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    if (end == start) {  // An empty match splits nothing; step over one character.
      if (start >= run.size()) break;
      offset = start + utf8_sequence_length(run, start);
      continue;
    }
    if (start > gap_start) pieces.push_back(run.substr(gap_start, start - gap_start));
    pieces.push_back(run.substr(start, end - start));
    gap_start = offset = end;
  }
  if (gap_start < run.size()) pieces.push_back(run.substr(gap_start));
}

}  // namespace inkstone
