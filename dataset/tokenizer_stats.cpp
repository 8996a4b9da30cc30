#include "dataset/tokenizer_stats.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/utf8.h"

namespace inkstone {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int64_t word_count(std::string_view text) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    words += !is_space(c) && !in_word;
    in_word = !is_space(c);
  }
  return words;
}

// For every byte, whether a character starts there (invalid bytes count as one-byte characters).
std::vector<bool> character_starts(std::string_view text) {
  std::vector<bool> starts(text.size() + 1, false);
  starts[text.size()] = true;
  for (size_t pos = 0; pos < text.size();) {
    starts[pos] = true;
    pos += std::max<size_t>(utf8_sequence_length(text, pos), 1);
  }
  return starts;
}

// Right to left from the number's end, the cuts must fall every g digits, g being the last group's length.
bool right_aligned(size_t begin, size_t end, const std::vector<size_t>& cuts) {
  if (cuts.empty()) return true;
  const size_t group = end - cuts.back();
  size_t expected = end;
  for (auto cut = cuts.rbegin(); cut != cuts.rend(); ++cut) {
    if (expected - *cut != group) return false;
    expected = *cut;
  }
  return expected - begin <= group;
}

}  // namespace

void TokenizerStats::add(const TokenizerStats& o) {
  bytes += o.bytes, tokens += o.tokens, words += o.words, single_byte_tokens += o.single_byte_tokens;
  byte_exact = byte_exact && o.byte_exact;
  character_splitting_tokens += o.character_splitting_tokens;
  numbers += o.numbers, aligned_numbers += o.aligned_numbers;
  line_breaks += o.line_breaks, line_breaks_alone += o.line_breaks_alone;
  for (const auto& [piece, count] : o.token_counts) token_counts[piece] += count;
}

double TokenizerStats::bytes_per_token() const { return static_cast<double>(bytes) / std::max<int64_t>(tokens, 1); }
double TokenizerStats::tokens_per_word() const { return static_cast<double>(tokens) / std::max<int64_t>(words, 1); }
double TokenizerStats::character_split_rate() const {
  return static_cast<double>(character_splitting_tokens) / std::max<int64_t>(tokens, 1);
}
double TokenizerStats::digit_alignment() const {
  return numbers == 0 ? 1.0 : static_cast<double>(aligned_numbers) / static_cast<double>(numbers);
}
double TokenizerStats::line_break_purity() const {
  return line_breaks == 0 ? 1.0 : static_cast<double>(line_breaks_alone) / static_cast<double>(line_breaks);
}

double TokenizerStats::unigram_bits_per_byte() const {
  if (tokens == 0 || bytes == 0) return 0.0;
  double bits = 0;
  for (const auto& [piece, count] : token_counts) {
    const double p = static_cast<double>(count) / static_cast<double>(tokens);
    bits -= p * std::log2(p);
  }
  return bits * static_cast<double>(tokens) / static_cast<double>(bytes);
}

TokenizerStats tokenizer_stats(std::string_view text, const std::vector<std::string>& pieces) {
  TokenizerStats s;
  s.bytes = static_cast<int64_t>(text.size());
  s.tokens = static_cast<int64_t>(pieces.size());
  s.words = word_count(text);
  std::string joined;
  std::vector<size_t> cuts = {0};  // byte offset where each token starts, then the end
  for (const auto& piece : pieces) {
    s.single_byte_tokens += piece.size() == 1;
    ++s.token_counts[piece];
    joined += piece;
    cuts.push_back(joined.size());
  }
  s.byte_exact = joined == text;
  if (!s.byte_exact) return s;

  const std::vector<bool> starts = character_starts(text);
  for (size_t t = 0; t + 1 < cuts.size(); ++t) s.character_splitting_tokens += !starts[cuts[t]] || !starts[cuts[t + 1]];

  for (size_t t = 0; t + 1 < cuts.size(); ++t) {
    const std::string_view token = text.substr(cuts[t], cuts[t + 1] - cuts[t]);
    const auto breaks = std::count(token.begin(), token.end(), '\n');
    s.line_breaks += breaks;
    if (std::all_of(token.begin(), token.end(), is_space)) s.line_breaks_alone += breaks;
  }

  for (size_t begin = 0; begin < text.size();) {
    if (!is_digit(text[begin])) {
      ++begin;
      continue;
    }
    size_t end = begin;
    while (end < text.size() && is_digit(text[end])) ++end;
    if (end - begin >= 2) {
      std::vector<size_t> inner;
      for (size_t cut : cuts)
        if (cut > begin && cut < end) inner.push_back(cut);
      ++s.numbers;
      s.aligned_numbers += right_aligned(begin, end, inner);
    }
    begin = end;
  }
  return s;
}

TokenizerStats tokenizer_stats(std::string_view text, const Tokenizer& tokenizer) {
  std::vector<std::string> pieces;
  for (int32_t id : tokenizer.encode(text)) pieces.push_back(tokenizer.token_bytes(id));
  return tokenizer_stats(text, pieces);
}

}  // namespace inkstone
