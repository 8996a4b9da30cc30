#include "core/utf8.h"

#include <cstdint>

namespace inkstone {

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

char32_t utf8_code_point(std::string_view text, size_t pos, size_t length) {
  static constexpr uint8_t kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  char32_t code_point = static_cast<uint8_t>(text[pos]) & kLeadMask[length];
  for (size_t k = 1; k < length; ++k) code_point = (code_point << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3F);
  return code_point;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_utf8_run(
      text, [&](std::string_view run) { out += run; }, [&](std::string_view) { append_utf8(out, U'\uFFFD'); });
  return out;
}

}  // namespace inkstone
