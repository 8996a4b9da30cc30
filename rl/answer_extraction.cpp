// Answer extraction and comparison; the rules are stated in answer_extraction.h.
#include "rl/answer_extraction.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace inkstone {
namespace {

constexpr std::string_view kMarker = "####";
// A run of at most 36 digits fits in 128 bits, as does 10^36 for its decimal places.
constexpr size_t kMaxDigits = 36;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

struct NumberMatch {
  std::string text;  // sign, digits, dot and fraction bar, without commas or '$'
  size_t end = 0;    // one past the last character read
};

// The number that starts exactly at `pos`, if one does.
std::optional<NumberMatch> number_at(std::string_view text, size_t pos) {
  NumberMatch match;
  size_t i = pos;
  if (i < text.size() && text[i] == '-') {
    match.text += '-';
    ++i;
  }
  if (i < text.size() && text[i] == '$') ++i;
  const bool starts =
      i < text.size() && (is_digit(text[i]) || (text[i] == '.' && i + 1 < text.size() && is_digit(text[i + 1])));
  if (!starts) return std::nullopt;
  size_t end = i;
  while (end < text.size() && (is_digit(text[end]) || text[end] == '.' || text[end] == ',')) ++end;
  while (!is_digit(text[end - 1])) --end;  // trailing dots and commas; the run holds a digit, so this stops
  for (size_t k = i; k < end; ++k) {
    if (text[k] != ',') match.text += text[k];
  }
  if (end + 1 < text.size() && text[end] == '/' && is_digit(text[end + 1])) {
    match.text += '/';
    for (++end; end < text.size() && is_digit(text[end]); ++end) match.text += text[end];
  }
  match.end = end;
  return match;
}

std::optional<__int128> parse_digits(std::string_view digits) {
  if (digits.empty() || digits.size() > kMaxDigits || !std::all_of(digits.begin(), digits.end(), is_digit)) {
    return std::nullopt;
  }
  __int128 value = 0;
  for (char c : digits) value = value * 10 + (c - '0');
  return value;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

struct BracedGroup {
  std::string_view inner;
  size_t end = 0;  // one past the closing brace
};

// The group opened by the '{' at `open`, closed by its matching '}'. A backslash escapes the next character, so
// "\{" and "\}" are not braces while "\\{" is a line break followed by one.
std::optional<BracedGroup> braced_group(std::string_view text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == '{') {
      ++depth;
    } else if (text[i] == '}' && --depth == 0) {
      return BracedGroup{text.substr(open + 1, i - open - 1), i + 1};
    }
  }
  return std::nullopt;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

// A trailing unit: MATH writes "5.4 \text{ cents}" and "864 \mbox{ inches}^2", the unit's text starting with a
// space. Everything from there on goes; an answer that is only such text keeps it.
void drop_trailing_unit(std::string& s) {
  for (std::string_view unit : {"\\text{ ", "\\mbox{ "}) {
    const size_t at = s.find(unit);
    if (at != std::string::npos && !trim(std::string_view(s).substr(0, at)).empty()) s.erase(at);
  }
}

// \text{X} and its kin as X.
void unwrap_text(std::string& s) {
  for (std::string_view command : {"\\text{", "\\textbf{", "\\mbox{"}) {
    for (size_t at = s.find(command); at != std::string::npos; at = s.find(command, at)) {
      const auto group = braced_group(s, at + command.size() - 1);
      if (!group) break;
      s.replace(at, group->end - at, std::string(group->inner));
    }
  }
}

// TeX's shorthand of single-token arguments, "\frac12" and "\sqrt2", spelt with braces: "\frac{1}{2}", "\sqrt{2}".
// A token is one character or a command such as \pi; whitespace before an argument is skipped, and \sqrt's
// optional "[n]" is kept as it is.
void brace_arguments(std::string& s, std::string_view command, int arguments) {
  for (size_t at = s.find(command); at != std::string::npos; at = s.find(command, at + 1)) {
    size_t pos = at + command.size();
    if (pos < s.size() && is_alpha(s[pos])) continue;  // a longer command name
    if (pos < s.size() && s[pos] == '[') {
      pos = s.find(']', pos);
      if (pos == std::string::npos) return;
      ++pos;
    }
    for (int k = 0; k < arguments; ++k) {
      while (pos < s.size() && is_space(s[pos])) ++pos;
      if (pos >= s.size()) return;
      if (s[pos] == '{') {
        const auto group = braced_group(s, pos);
        if (!group) return;
        pos = group->end;
        continue;
      }
      size_t end = pos + 1;
      if (s[pos] == '\\') {
        while (end < s.size() && is_alpha(s[end])) ++end;
      }
      s.insert(end, "}");
      s.insert(pos, "{");
      pos = end + 2;
    }
  }
}

// A normalised MATH answer as a number: what parse_number reads, or \frac{a}{b} of two such numbers.
std::optional<Rational> math_number(std::string_view s) {
  const bool negative = !s.empty() && s.front() == '-';
  std::string_view body = negative ? s.substr(1) : s;
  constexpr std::string_view kFrac = "\\frac";
  if (body.substr(0, kFrac.size()) != kFrac) return parse_number(s);
  if (body.substr(kFrac.size(), 1) != "{") return std::nullopt;
  const auto top = braced_group(body, kFrac.size());
  if (!top || body.substr(top->end, 1) != "{") return std::nullopt;
  const auto bottom = braced_group(body, top->end);
  if (!bottom || bottom->end != body.size()) return std::nullopt;
  const auto a = parse_number(top->inner), b = parse_number(bottom->inner);
  if (!a || !b) return std::nullopt;
  const auto value = divide(*a, *b);
  if (!value || !negative) return value;
  return make_rational(-static_cast<__int128>(value->num), value->den);
}

}  // namespace

std::optional<std::string> extract_marked_number(std::string_view text) {
  std::optional<std::string> last;
  for (size_t at = text.find(kMarker); at != std::string_view::npos; at = text.find(kMarker, at + 1)) {
    size_t pos = at + kMarker.size();
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
    if (auto match = number_at(text, pos)) last = std::move(match->text);
  }
  return last;
}

std::optional<std::string> extract_last_number(std::string_view text) {
  std::optional<std::string> last;
  size_t pos = 0;
  while (pos < text.size()) {
    const bool sign_allowed = text[pos] != '-' || pos == 0 || !is_alnum(text[pos - 1]);
    if (auto match = sign_allowed ? number_at(text, pos) : std::nullopt) {
      last = std::move(match->text);
      pos = match->end;
    } else {
      ++pos;
    }
  }
  return last;
}

std::optional<std::string> extract_numeric_answer(std::string_view text) {
  if (auto marked = extract_marked_number(text)) return marked;
  return extract_last_number(text);
}

std::optional<std::string> extract_marked_text(std::string_view text) {
  const size_t at = text.rfind(kMarker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at + kMarker.size());
  rest = trim(rest.substr(0, rest.find('\n')));
  if (rest.empty()) return std::nullopt;
  return std::string(rest);
}

std::optional<Rational> parse_number(std::string_view text) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  const __int128 sign = negative ? -1 : 1;
  if (const size_t bar = text.find('/'); bar != std::string_view::npos) {
    const auto num = parse_digits(text.substr(0, bar)), den = parse_digits(text.substr(bar + 1));
    if (!num || !den) return std::nullopt;
    return make_rational(sign * *num, *den);
  }
  const size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view places = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  const std::string digits = std::string(whole) + std::string(places);
  const auto value = parse_digits(digits);
  if (!value || places.size() > kMaxDigits) return std::nullopt;
  __int128 scale = 1;
  for (size_t k = 0; k < places.size(); ++k) scale *= 10;
  return make_rational(sign * *value, scale);
}

bool numeric_answers_equal(std::string_view answer, std::string_view reference) {
  const auto a = parse_number(answer), b = parse_number(reference);
  return a && b && *a == *b;
}

std::optional<std::string> extract_last_boxed(std::string_view text) {
  size_t start = std::string_view::npos, keyword_end = 0;
  for (std::string_view keyword : {"\\boxed", "\\fbox"}) {
    const size_t at = text.rfind(keyword);
    if (at != std::string_view::npos && (start == std::string_view::npos || at > start)) {
      start = at;
      keyword_end = at + keyword.size();
    }
  }
  if (start == std::string_view::npos) return std::nullopt;
  size_t pos = keyword_end;
  while (pos < text.size() && is_space(text[pos])) ++pos;
  if (pos >= text.size()) return std::nullopt;
  if (text[pos] == '{') {
    const auto group = braced_group(text, pos);
    if (!group) return std::nullopt;
    return std::string(group->inner);
  }
  if (pos == keyword_end) return std::nullopt;  // "\boxedx" is another command, not a box
  const size_t end = std::min(text.find_first_of(" \t\r\n$", pos), text.size());
  return std::string(text.substr(pos, end - pos));
}

std::string normalize_math_answer(std::string_view answer) {
  std::string s(answer);
  for (std::string_view noise : {"\\left", "\\right", "\\displaystyle", "\\!", "\\,", "\\;", "\\:", "^{\\circ}",
                                 "^\\circ", "\\%", "%", "\\$", "$"}) {
    replace_all(s, noise, "");
  }
  replace_all(s, "\\dfrac", "\\frac");
  replace_all(s, "\\tfrac", "\\frac");
  drop_trailing_unit(s);
  unwrap_text(s);
  brace_arguments(s, "\\frac", 2);
  brace_arguments(s, "\\sqrt", 1);
  s.erase(std::remove_if(s.begin(), s.end(), is_space), s.end());
  while (!s.empty() && s.back() == '.') s.pop_back();
  if (std::count(s.begin(), s.end(), '=') == 1 && s.size() > 2 && s[1] == '=' && is_alpha(s[0])) s.erase(0, 2);
  static const std::regex kGroupedThousands(R"(-?\d{1,3}(,\d{3})+(\.\d+)?)");
  if (std::regex_match(s, kGroupedThousands)) s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  return s;
}

bool math_answers_equal(std::string_view answer, std::string_view reference) {
  const std::string a = normalize_math_answer(answer), b = normalize_math_answer(reference);
  if (a == b) return true;
  const auto x = math_number(a), y = math_number(b);
  return x && y && *x == *y;
}

}  // namespace inkstone
