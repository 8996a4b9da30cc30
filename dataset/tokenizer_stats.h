// Intrinsic measures of a tokenizer on a text, defined without a trained model (TokEval's family):
// compression, fertility, UTF-8 character integrity, digit place-value alignment, line-break handling, and the
// text's unigram entropy under the tokenizer.
// docs/tokenizers.md defines each.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/tokenizer.h"

namespace inkstone {

struct TokenizerStats {
  int64_t bytes = 0, tokens = 0, words = 0;
  int64_t single_byte_tokens = 0;
  bool byte_exact = true;  // the tokens' bytes concatenate to the text (else the boundary measures are not kept)
  // UTF-8 integrity: tokens that begin or end inside a multi-byte character (they split it).
  int64_t character_splitting_tokens = 0;
  // Numbers: maximal runs of two or more ASCII digits; aligned when cut right to left into equal groups (the
  // leftmost group may be shorter), so a token's digits share a place value across numbers.
  int64_t numbers = 0, aligned_numbers = 0;
  // Line breaks ('\n'): those whose token holds only whitespace (not glued to words).
  int64_t line_breaks = 0, line_breaks_alone = 0;
  // How often each token (by its bytes) occurs: the text's unigram distribution under this tokenizer.
  std::map<std::string, int64_t> token_counts;

  void add(const TokenizerStats& other);
  double bytes_per_token() const;
  double tokens_per_word() const;
  double character_split_rate() const;  // character_splitting_tokens / tokens
  double digit_alignment() const;       // aligned_numbers / numbers (1 without numbers)
  double line_break_purity() const;     // line_breaks_alone / line_breaks (1 without line breaks)
  // −Σ p log2 p over token_counts, per byte of text: what a model that knows only token frequencies would pay, the
  // baseline a language model's bits per byte must beat.
  double unigram_bits_per_byte() const;
};

// The measures of `text` cut into `pieces` (each token's bytes, in order).
TokenizerStats tokenizer_stats(std::string_view text, const std::vector<std::string>& pieces);
TokenizerStats tokenizer_stats(std::string_view text, const Tokenizer& tokenizer);

}  // namespace inkstone
