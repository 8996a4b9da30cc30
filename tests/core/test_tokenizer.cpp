// Tokenizers: the byte tokenizer, hand-made BPE fixtures with hand-derived ids, and GPT-2 against references.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "core/bpe_tokenizer.h"
#include "core/byte_tokenizer.h"
#include "core/errors.h"
#include "core/tokenizer.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

using Ids = std::vector<int32_t>;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

std::unique_ptr<Tokenizer> reload(const Tokenizer& tokenizer, const std::string& name) {
  const auto file = testing::temp_dir(name) / "tokenizer.json";
  tokenizer.save(file);
  return load_tokenizer(file.parent_path().string());
}

TEST(ByteTokenizer, RoundTripsRandomBytes) {
  ByteTokenizer tokenizer;
  const std::string text = random_bytes(10000, 7);
  const Ids ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) ASSERT_EQ(ids[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(tokenizer.vocab_size(), 260);
  EXPECT_EQ(tokenizer.specials().bos, 256);
  EXPECT_EQ(tokenizer.specials().eos, 257);
  EXPECT_EQ(tokenizer.specials().pad, 258);
  EXPECT_EQ(tokenizer.specials().mask, 259);
  EXPECT_EQ(tokenizer.decode({104, 256, 105}), "hi");
  EXPECT_EQ(tokenizer.decode({104, 256, 105}, /*keep_special=*/true), "h<|bos|>i");
}

TEST(ByteTokenizer, SavesAsTokenizerJsonAndReloadsAsByte) {
  ByteTokenizer tokenizer;
  auto reloaded = reload(tokenizer, "byte_reload");
  EXPECT_EQ(reloaded->kind(), "byte");
  EXPECT_EQ(reloaded->fingerprint(), tokenizer.fingerprint());
  EXPECT_EQ(load_tokenizer("byte")->kind(), "byte");
  // Read as plain BPE (no merges) the same document gives the same ids.
  BpeTokenizer as_bpe(tokenizer.to_json(), "byte.json");
  const std::string text = random_bytes(2000, 11);
  EXPECT_EQ(as_bpe.encode(text), tokenizer.encode(text));
  EXPECT_EQ(as_bpe.specials().mask, 259);
}

TEST(Tokenizer, OutOfRangeIdsAndBadSpecsAreInputErrors) {
  ByteTokenizer bytes;
  try {
    bytes.decode({1, 260});
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("260"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("vocabulary of 260"), std::string::npos);
  }
  EXPECT_THROW(bytes.decode({-1}), InputError);
  EXPECT_THROW(load_tokenizer("no/such/tokenizer.json"), InputError);
  const auto bad = testing::temp_dir("bad_json") / "tokenizer.json";
  std::ofstream(bad) << "{ not json";
  EXPECT_THROW(load_tokenizer(bad.string()), InputError);
  EXPECT_THROW(tokenizer_from_json({{"model", {{"type", "WordPiece"}}}}, "x.json"), InputError);
}

// The fixtures hold ids 0..255 = bytes (as GPT-2's byte-level characters: space is "Ġ", newline "Ċ"), then
// these merges, rank = order, each adding the next id:
//   0 "Ġ t" -> 256 "Ġt"    1 "h e" -> 257 "he"     2 "Ġt he" -> 258 "Ġthe"   3 "1 2" -> 259 "12"
//   4 "12 3" -> 260 "123"  5 "Ċ Ċ" -> 261 "ĊĊ"     6 "Ġ Ġ" -> 262 "ĠĠ"       7 "' s" -> 263 "'s"
//   8 "l l" -> 264 "ll"    9 "' ll" -> 265 "'ll"   10 "ð Ł" -> 266 (bytes F0 9F, the start of most emoji)
// and the added special <|endoftext|> = 267. tiny_bpe_gpt2_split.json splits with the GPT-2 regex,
// tiny_bpe_gpt4_split.json with the GPT-4 style Split + ByteLevel(use_regex = false) and list-form merges.
// Derivations (pieces from the regex, then lowest-rank pair first, leftmost first among equal ranks):
//   "the 123 he's": pieces "the" " 123" " he" "'s" (GPT-4: "the" " " "123" " he" "'s").
//     "the": t h e -> (h,e) r1 -> [t=116, he=257]. " 123": Ġ 1 2 3 -> (1,2) r3 -> (12,3) r4 -> [Ġ=32, 260].
//     " he" -> [32, 257]. "'s" -> r7 -> [263].                              => 116 257 32 260 32 257 263
//   " the\n\n\nx": GPT-2 pieces " the" "\n\n" "\n" "x" (\s+(?!\S) backs off one newline before 'x').
//     " the": Ġ t h e -> (Ġ,t) r0 -> Ġt h e -> (h,e) r1 -> Ġt he -> r2 -> [258]. "\n\n" -> r5 -> [261].
//                                                                          => 258 261 10 120
//   "   x": pieces "  " " x": "  " -> r6 -> [262]; " x" has no merge -> [32, 120].   => 262 32 120
//   "we'll": pieces "we" "'ll": w e -> [119, 101]; ' l l -> (l,l) r8 -> (',ll) r9 -> [265]. => 119 101 265
//   "\xF0\x9F\x98\x80" (U+1F600): one piece; (F0,9F) r10 -> [266, 0x98=152, 0x80=128].
//   "1234123": GPT-2 one piece: (1,2) at 0 then at 4 (r3) -> 12 3 4 12 3 -> (12,3) twice -> [260, 52, 260].
//     GPT-4 pieces "123" "412" "3" (\p{N}{1,3}) -> [260], 4 1 2 -> [52, 259], [51].
//   Invalid UTF-8 "a\xFFb\xC3": valid runs "a", "b" and raw bytes FF, C3 each alone -> [97, 255, 98, 195].
// The ids were also checked against Hugging Face's tokenizers.js on both fixtures.
struct FixtureCase {
  std::string text;
  Ids gpt2_split;
  Ids gpt4_split;
};

const std::vector<FixtureCase> kFixtureCases = {
    {"the 123 he's", {116, 257, 32, 260, 32, 257, 263}, {116, 257, 32, 260, 32, 257, 263}},
    {" the\n\n\nx", {258, 261, 10, 120}, {258, 261, 10, 120}},
    {"   x", {262, 32, 120}, {262, 32, 120}},
    {"we'll", {119, 101, 265}, {119, 101, 265}},
    {"\xF0\x9F\x98\x80", {266, 152, 128}, {266, 152, 128}},
    {"1234123", {260, 52, 260}, {260, 52, 259, 51}},
    {"the<|endoftext|>the", {116, 257, 267, 116, 257}, {116, 257, 267, 116, 257}},
    {"a\xFF" "b\xC3", {97, 255, 98, 195}, {97, 255, 98, 195}},
    {" the\xFF the", {258, 255, 258}, {258, 255, 258}},
};

std::string fixture(const std::string& name) { return (testing::source_dir() / "tests" / "data" / name).string(); }

TEST(BpeFixture, EncodesTrickyTextToHandDerivedIds) {
  for (const bool gpt4 : {false, true}) {
    auto tokenizer = load_tokenizer(fixture(gpt4 ? "tiny_bpe_gpt4_split.json" : "tiny_bpe_gpt2_split.json"));
    ASSERT_EQ(tokenizer->kind(), "bpe");
    auto reloaded = reload(*tokenizer, gpt4 ? "fixture4" : "fixture2");
    for (const FixtureCase& c : kFixtureCases) {
      const Ids& expected = gpt4 ? c.gpt4_split : c.gpt2_split;
      EXPECT_EQ(tokenizer->encode(c.text), expected) << (gpt4 ? "gpt4 split: " : "gpt2 split: ") << c.text;
      EXPECT_EQ(reloaded->encode(c.text), expected) << "after save and reload: " << c.text;
      EXPECT_EQ(tokenizer->decode(expected, /*keep_special=*/true), c.text);
    }
    // bos = eos = <|endoftext|>; pad and mask were appended and survive the reload.
    EXPECT_EQ(tokenizer->specials().bos, 267);
    EXPECT_EQ(tokenizer->specials().eos, 267);
    EXPECT_EQ(tokenizer->specials().pad, 268);
    EXPECT_EQ(tokenizer->specials().mask, 269);
    EXPECT_EQ(reloaded->specials().mask, 269);
    EXPECT_EQ(reloaded->to_json(), tokenizer->to_json());
    EXPECT_EQ(tokenizer->encode("<|pad|><|mask|>"), (Ids{268, 269}));
    EXPECT_EQ(tokenizer->decode({116, 268, 257}), "the");
  }
}

TEST(BpeFixture, RoundTripsRandomBytes) {
  auto tokenizer = load_tokenizer(fixture("tiny_bpe_gpt2_split.json"));
  const std::string text = random_bytes(20000, 3);
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
}

std::unique_ptr<Tokenizer> gpt2_or_null() {
  const auto file = testing::shared_data_dir() / "tokenizers" / "gpt2" / "tokenizer.json";
  if (!std::filesystem::exists(file)) return nullptr;
  return load_tokenizer(file.string());
}

// Expected ids generated with two independent references that agreed on every string: Hugging Face's
// tokenizers.js (npm @huggingface/tokenizers 0.2.0) on this tokenizer.json and tiktoken's "gpt2" encoding.
TEST(Gpt2, MatchesReferenceEncodings) {
  auto gpt2 = gpt2_or_null();
  if (!gpt2) GTEST_SKIP() << "shared GPT-2 tokenizer.json not present";
  const std::vector<std::pair<std::string, Ids>> cases = {
      {"Hello world", {15496, 995}},
      {" the", {262}},
      {"I'm can't we'll they've he'd she's THEY'RE",
       {40, 1101, 460, 470, 356, 1183, 484, 1053, 339, 1549, 673, 338, 33302, 6, 2200}},
      {"  leading spaces and trailing   ", {220, 3756, 9029, 290, 25462, 220, 220, 220}},
      {"tabs\tand\nnew\n\nlines\r\n", {8658, 82, 197, 392, 198, 3605, 198, 198, 6615, 201, 198}},
      {"numbers 1234567890 3.14159 -42 1,000,000",
       {77, 17024, 17031, 2231, 30924, 3829, 513, 13, 1415, 19707, 532, 3682, 352, 11, 830, 11, 830}},
      {"emoji 😀🎉 👩‍👩‍👧",
       {368, 31370, 30325, 222, 8582, 236, 231, 50169, 102, 447, 235, 41840, 102, 447, 235, 41840, 100}},
      {"naïve café résumé 日本語のテキスト",
       {2616, 38776, 40304, 40560, 16345, 2634, 10545, 245, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"Hello<|endoftext|>World", {15496, 50256, 10603}},
      {"     ", {220, 220, 220, 220, 220}},
      {"a\n\n\n b", {64, 628, 198, 275}},
      {"x  y   z", {87, 220, 331, 220, 220, 1976}},
      {"!!!???...", {10185, 28358, 986}},
      {"don't  'quote' \"double\"", {9099, 470, 220, 705, 22708, 6, 366, 23352, 1}},
      {"ÀÉÎÕÜ ß ﬁ", {127, 222, 38351, 127, 236, 127, 243, 127, 250, 6184, 253, 27332, 105, 223}},
      {"$$$ 100% @user #tag", {13702, 3, 1802, 4, 2488, 7220, 1303, 12985}},
      {"   \n  \n", {220, 220, 220, 198, 220, 220, 198}},
  };
  auto reloaded = reload(*gpt2, "gpt2");
  for (const auto& [text, expected] : cases) {
    EXPECT_EQ(gpt2->encode(text), expected) << text;
    EXPECT_EQ(reloaded->encode(text), expected) << "after save and reload: " << text;
    EXPECT_EQ(gpt2->decode(expected, /*keep_special=*/true), text);
  }
  EXPECT_EQ(gpt2->specials().bos, 50256);
  EXPECT_EQ(gpt2->specials().eos, 50256);
  EXPECT_EQ(gpt2->specials().pad, 50257);
  EXPECT_EQ(gpt2->specials().mask, 50258);
  EXPECT_EQ(gpt2->vocab_size(), 50259);
  EXPECT_EQ(reloaded->specials().mask, 50258);
  EXPECT_EQ(reloaded->fingerprint(), gpt2->fingerprint());
  const std::string noise = random_bytes(5000, 5);
  EXPECT_EQ(gpt2->decode(gpt2->encode(noise)), noise);
  EXPECT_EQ(reloaded->encode(noise), gpt2->encode(noise));
}

}  // namespace
}  // namespace inkstone
