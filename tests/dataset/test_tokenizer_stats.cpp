// Intrinsic tokenizer measures (dataset/tokenizer_stats.h) on hand-made tokenizations with known answers, and on
// the byte tokenizer, which splits every multi-byte character and cuts numbers digit by digit.
#include <gtest/gtest.h>

#include <cmath>

#include "dataset/byte_tokenizer.h"
#include "dataset/tokenizer_stats.h"

namespace inkstone {
namespace {

TEST(TokenizerStats, CompressionAndFertility) {
  const auto s = tokenizer_stats("the cat sat", {"the", " cat", " s", "at"});
  EXPECT_EQ(s.bytes, 11);
  EXPECT_EQ(s.tokens, 4);
  EXPECT_EQ(s.words, 3);
  EXPECT_DOUBLE_EQ(s.bytes_per_token(), 11.0 / 4);
  EXPECT_DOUBLE_EQ(s.tokens_per_word(), 4.0 / 3);
  EXPECT_TRUE(s.byte_exact);
}

// ab ab c d: p = 1/2, 1/4, 1/4, so 1.5 bits a token; 4 tokens over 6 bytes is 1 bit a byte. Counts add over texts.
TEST(TokenizerStats, UnigramEntropyPerByte) {
  auto s = tokenizer_stats("ababcd", {"ab", "ab", "c", "d"});
  EXPECT_DOUBLE_EQ(s.unigram_bits_per_byte(), 1.0);
  s.add(tokenizer_stats("cd", {"c", "d"}));  // ab 2, c 2, d 2 over 8 bytes: log2(3) · 6 / 8
  EXPECT_NEAR(s.unigram_bits_per_byte(), std::log2(3.0) * 6.0 / 8.0, 1e-15);
  EXPECT_EQ(tokenizer_stats("aaaa", ByteTokenizer()).unigram_bits_per_byte(), 0.0);
}

// "é" is two bytes, "€" three: a token that starts or ends inside either splits it.
TEST(TokenizerStats, TokensThatCutACharacterAreCounted) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac";
  const auto whole = tokenizer_stats(text, {"caf", "\xc3\xa9", " ", "\xe2\x82\xac"});
  EXPECT_EQ(whole.character_splitting_tokens, 0);
  const auto cut = tokenizer_stats(text, {"caf\xc3", "\xa9 \xe2", "\x82\xac"});
  EXPECT_EQ(cut.character_splitting_tokens, 3);  // each of the three begins or ends inside a character
  EXPECT_DOUBLE_EQ(cut.character_split_rate(), 1.0);
  const auto bytes = tokenizer_stats(text, ByteTokenizer());
  EXPECT_EQ(bytes.character_splitting_tokens, 5);  // 2 + 3 bytes of the two characters, one token each
}

TEST(TokenizerStats, NumbersAreAlignedWhenCutRightToLeftInEqualGroups) {
  // 1|234|567 aligned; 123|456|7 not; 12|34 aligned; one-token 99 aligned; a lone digit is not a number.
  const auto s = tokenizer_stats("1234567 1234567 1234 99 5",
                                 {"1", "234", "567", " ", "123", "456", "7", " ", "12", "34", " 99", " 5"});
  EXPECT_EQ(s.numbers, 4);
  EXPECT_EQ(s.aligned_numbers, 3);
  EXPECT_DOUBLE_EQ(s.digit_alignment(), 0.75);
  const auto bytes = tokenizer_stats("2024 and 31", ByteTokenizer());
  EXPECT_EQ(bytes.numbers, 2);
  EXPECT_EQ(bytes.aligned_numbers, 2);  // groups of one digit
}

TEST(TokenizerStats, LineBreaksGluedToWordsAreCounted) {
  const auto s = tokenizer_stats("a\nb\n\nc\n", {"a", "\n", "b\n", "\n", "c", "\n"});
  EXPECT_EQ(s.line_breaks, 4);
  EXPECT_EQ(s.line_breaks_alone, 3);
  EXPECT_DOUBLE_EQ(s.line_break_purity(), 0.75);
}

TEST(TokenizerStats, ATokenizerThatNormalisesKeepsOnlyCountMeasures) {
  const auto s = tokenizer_stats("Hello 12", {"hello", " 12"});
  EXPECT_FALSE(s.byte_exact);
  EXPECT_EQ(s.tokens, 2);
  EXPECT_EQ(s.numbers, 0);  // not measured
  TokenizerStats total = tokenizer_stats("ab", {"a", "b"});
  total.add(s);
  EXPECT_FALSE(total.byte_exact);
  EXPECT_EQ(total.tokens, 4);
}

}  // namespace
}  // namespace inkstone
