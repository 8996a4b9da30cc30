// Tokenizers: the byte tokenizer, hand-made BPE fixtures with hand-derived ids, GPT-2 against references, and
// the Hugging Face pipeline parts (normalizers, Metaspace, byte fallback, decoders) on hand-computed cases.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "core/errors.h"
#include "dataset/bpe_tokenizer.h"
#include "dataset/byte_tokenizer.h"
#include "dataset/normalizer.h"
#include "dataset/pretokenizer.h"
#include "dataset/tokenizer.h"
#include "dataset/tokenizer_decoder.h"
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

using nlohmann::json;

// The message of the InputError `make` throws, or "" when it throws none.
template <typename Make>
std::string input_error_of(Make&& make) {
  try {
    make();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Normalizer, UnicodeFormsLowercaseReplacePrependStrip) {
  EXPECT_EQ(Normalizer(json{{"type", "NFC"}}).normalize("e\u0301"), "\u00e9");
  EXPECT_EQ(Normalizer(json{{"type", "NFD"}}).normalize("\u00e9"), "e\u0301");
  EXPECT_EQ(Normalizer(json{{"type", "NFKC"}}).normalize("\ufb01 \uff21\u2460"), "fi A1");
  EXPECT_EQ(Normalizer(json{{"type", "NFKD"}}).normalize("\ufb01\u00e9"), "fie\u0301");
  // Per code point, no final-sigma context (Rust's char::to_lowercase); U+0130 takes its full mapping "i" + U+0307.
  EXPECT_EQ(Normalizer(json{{"type", "Lowercase"}}).normalize("\u03a3\u0391\u03a3 \u0130X"),
            "\u03c3\u03b1\u03c3 i\u0307x");
  const json collapse = {{"type", "Replace"}, {"pattern", {{"String", "  "}}}, {"content", " "}};
  EXPECT_EQ(Normalizer(collapse).normalize("a     b"), "a   b");  // Non-overlapping, left to right, one pass.
  const json regex = {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}};
  EXPECT_EQ(Normalizer(regex).normalize("a     b  c"), "a b c");
  const json prepend = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  EXPECT_EQ(Normalizer(prepend).normalize("x"), "\u2581x");
  EXPECT_EQ(Normalizer(prepend).normalize(""), "");
  const json strip = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
  EXPECT_EQ(Normalizer(strip).normalize("\u3000 a b\n\u00a0"), "a b");
  const json sequence = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}};
  EXPECT_EQ(Normalizer(sequence).normalize("\uff21B"), "ab");
  EXPECT_TRUE(Normalizer(json()).is_identity());
}

TEST(Normalizer, PassesInvalidBytesThrough) {
  // Each valid run is normalized on its own, so a combining mark after an invalid byte stays apart.
  EXPECT_EQ(Normalizer(json{{"type", "NFC"}}).normalize("\xFF" "e\u0301\xFE\u0301"), "\xFF\u00e9\xFE\u0301");
  EXPECT_EQ(Normalizer(json{{"type", "Lowercase"}}).normalize("A\xC3" "B"), "a\xC3" "b");
  const json replace = {{"type", "Replace"}, {"pattern", {{"Regex", "b+"}}}, {"content", "c"}};
  EXPECT_EQ(Normalizer(replace).normalize("abb\x80" "bb"), "ac\x80" "c");
}

TEST(Normalizer, RefusesOtherTypesByName) {
  for (const char* type : {"BertNormalizer", "Precompiled", "StripAccents", "Nmt", "ByteLevel"}) {
    const std::string message = input_error_of([&] { Normalizer(json{{"type", type}}); });
    EXPECT_NE(message.find(std::string("'") + type + "'"), std::string::npos) << message;
  }
  const json nested = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "StripAccents"}}}}};
  EXPECT_EQ(input_error_of([&] { Normalizer{nested}; }), "normalizer type 'StripAccents' is not supported");
}

std::vector<std::string> pre_tokenize(const json& spec, std::string_view text, bool at_text_start) {
  const PreTokenizerPipeline pipeline(spec);
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  pipeline.split(text, at_text_start, pieces, storage);
  return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizerPipeline, MetaspacePrependSchemesAndSplit) {
  using Pieces = std::vector<std::string>;
  auto metaspace = [](const char* scheme, bool split) {
    return json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
  };
  // Runs of ▁ stay with the text after them (Hugging Face's MergedWithNext).
  EXPECT_EQ(pre_tokenize(metaspace("always", true), "hi  there", false), (Pieces{"\u2581hi", "\u2581\u2581there"}));
  EXPECT_EQ(pre_tokenize(metaspace("always", false), "hi there", false), (Pieces{"\u2581hi\u2581there"}));
  EXPECT_EQ(pre_tokenize(metaspace("always", true), " hi", false), (Pieces{"\u2581hi"}));  // Already starts with ▁.
  EXPECT_EQ(pre_tokenize(metaspace("first", true), "hi there", true), (Pieces{"\u2581hi", "\u2581there"}));
  EXPECT_EQ(pre_tokenize(metaspace("first", true), "hi there", false), (Pieces{"hi", "\u2581there"}));
  EXPECT_EQ(pre_tokenize(metaspace("never", true), "hi there", true), (Pieces{"hi", "\u2581there"}));
  const json old_style = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}};
  EXPECT_EQ(pre_tokenize(old_style, "hi", true), (Pieces{"hi"}));
  EXPECT_EQ(pre_tokenize(json(), "a b", true), (Pieces{"a b"}));
  EXPECT_EQ(input_error_of([] { PreTokenizerPipeline(json{{"type", "Whitespace"}}); }),
            "pre-tokenizer type 'Whitespace' is not supported");
}

// Llama 2 / Mistral v0.1 / TinyLlama: the normalizer that marks spaces and the decoder that undoes it.
const json kLlamaNormalizer = {
    {"type", "Sequence"},
    {"normalizers",
     {{{"type", "Prepend"}, {"prepend", "\u2581"}},
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
const json kLlamaDecoder = {{"type", "Sequence"},
                            {"decoders",
                             {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                              {{"type", "ByteFallback"}},
                              {{"type", "Fuse"}},
                              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};

TEST(TokenizerDecoder, LlamaChainMetaspaceAndNull) {
  const TokenizerDecoder chain(kLlamaDecoder);
  // <0xE2><0x96><0x81> is "▁" as bytes: valid UTF-8, so kept as text (not replaced, since Replace ran before).
  EXPECT_EQ(chain.decode({"\u2581Hello", "<0xE2>", "<0x96>", "<0x81>", "\u2581x"}), "Hello\u2581 x");
  // A byte run that is not valid UTF-8 gives one U+FFFD per byte token.
  EXPECT_EQ(chain.decode({"<0xE2>", "<0x96>", "a", "<0xc3>", "<0xA9>"}), "\ufffd\ufffda\u00e9");
  EXPECT_EQ(chain.decode({"\u2581\u2581a"}), " a");  // Strip removes one space only.

  const TokenizerDecoder first(json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}});
  EXPECT_EQ(first.decode({"\u2581\u2581a", "\u2581b"}), "a b");  // Every ▁ of the first token is dropped.
  const TokenizerDecoder never(json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}});
  EXPECT_EQ(never.decode({"\u2581a", "\u2581b"}), " a b");

  // Ã© is the bytes C3 A9 (é); "a b" has a character outside GPT-2's alphabet, so it stays as it is.
  EXPECT_EQ(TokenizerDecoder(json{{"type", "ByteLevel"}}).decode({"\u0120the", "<|x|>", "\u00c3\u00a9", "a b"}),
            " the<|x|>\u00e9a b");
  EXPECT_EQ(TokenizerDecoder(json()).decode({"a", "b"}), "a b");  // No decoder: joined by spaces.
  EXPECT_EQ(input_error_of([] { TokenizerDecoder(json{{"type", "WordPiece"}}); }),
            "decoder type 'WordPiece' is not supported");
}

// A SentencePiece-style BPE over characters: <unk> <s> </s> (added, special), the byte-fallback tokens
// <0x00>..<0xFF> at 3..258, then ▁ = 259, a = 260, b = 261 and the merges (rank = order)
// "▁ a" -> ▁a = 262, "a b" -> ab = 263, "▁a b" -> ▁ab = 264.
json char_bpe_document(const json& normalizer, const json& pre_tokenizer, const json& decoder, bool byte_fallback,
                       bool fuse_unk) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char text[8];
    std::snprintf(text, sizeof text, "<0x%02X>", b);
    vocab[text] = 3 + b;
  }
  vocab["\u2581"] = 259, vocab["a"] = 260, vocab["b"] = 261;
  vocab["\u2581a"] = 262, vocab["ab"] = 263, vocab["\u2581ab"] = 264;
  json added = json::array();
  for (const char* content : {"<unk>", "<s>", "</s>"}) {
    added.push_back({{"id", added.size()}, {"content", content}, {"normalized", false}, {"special", true}});
  }
  return {{"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", decoder},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"byte_fallback", byte_fallback},
            {"fuse_unk", fuse_unk},
            {"vocab", vocab},
            {"merges", json::array({json::array({"\u2581", "a"}), json::array({"a", "b"}),
                                    json::array({"\u2581a", "b"})})}}}};
}

TEST(CharBpe, LlamaStyleNormalizerAndByteFallback) {
  BpeTokenizer llama(char_bpe_document(kLlamaNormalizer, json(), kLlamaDecoder, true, true), "llama.json");
  // "ab" -> "▁ab": ▁ a b -> (▁,a) r0 -> ▁a b -> (▁a,b) r2 -> ▁ab.
  EXPECT_EQ(llama.encode("ab"), (Ids{264}));
  // "a b" -> "▁a▁b", one word (no pre-tokenizer): ▁ a ▁ b -> (▁,a) r0 -> ▁a ▁ b; nothing else merges.
  EXPECT_EQ(llama.encode("a b"), (Ids{262, 259, 261}));
  EXPECT_EQ(llama.decode({262, 259, 261}), "a b");
  // é is not in the vocabulary: its bytes C3 A9 as <0xC3> = 3 + 0xC3, <0xA9> = 3 + 0xA9.
  EXPECT_EQ(llama.encode("\u00e9"), (Ids{259, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(llama.decode({259, 3 + 0xC3, 3 + 0xA9}), "\u00e9");
  // Added tokens split the text first; each segment between gets its own ▁ from Prepend.
  EXPECT_EQ(llama.encode("<s>ab</s>ab"), (Ids{1, 264, 2, 264}));
  EXPECT_EQ(llama.decode({1, 264, 2}, /*keep_special=*/true), "<s> ab</s>");
  EXPECT_EQ(llama.decode({1, 264, 2}), "ab");
  EXPECT_EQ(llama.token_bytes(3 + 0x0A), "\n");
  EXPECT_EQ(llama.token_bytes(264), "\u2581ab");
  EXPECT_EQ(llama.token_id("\u2581ab"), 264);
  EXPECT_EQ(llama.specials().bos, 1);
  EXPECT_EQ(llama.specials().eos, 2);
  const auto reloaded = tokenizer_from_json(llama.to_json(), "reloaded");
  EXPECT_EQ(reloaded->to_json(), llama.to_json());
  EXPECT_EQ(reloaded->encode("<s>a b\u00e9"), (Ids{1, 262, 259, 261, 3 + 0xC3, 3 + 0xA9}));
}

TEST(CharBpe, UnknownCharactersWithoutByteFallback) {
  BpeTokenizer fused(char_bpe_document(kLlamaNormalizer, json(), kLlamaDecoder, false, true), "fused.json");
  EXPECT_EQ(fused.encode("\u00e9\u00e9a"), (Ids{259, 0, 260}));  // One <unk> for the run of two.
  BpeTokenizer unfused(char_bpe_document(kLlamaNormalizer, json(), kLlamaDecoder, false, false), "unfused.json");
  EXPECT_EQ(unfused.encode("\u00e9\u00e9a"), (Ids{259, 0, 0, 260}));
  // An invalid byte is a character never in the vocabulary: byte fallback gives <0xFF> = 258.
  BpeTokenizer fallback(char_bpe_document(kLlamaNormalizer, json(), kLlamaDecoder, true, false), "fallback.json");
  EXPECT_EQ(fallback.encode("a\xFF"), (Ids{262, 258}));
}

TEST(CharBpe, MetaspacePreTokenizerSchemes) {
  auto metaspace = [](const char* scheme) {
    return json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", true}};
  };
  BpeTokenizer first(char_bpe_document(json(), metaspace("first"), metaspace("first"), true, true), "first.json");
  EXPECT_EQ(first.encode("ab"), (Ids{264}));
  EXPECT_EQ(first.encode("<s>ab"), (Ids{1, 263}));  // After an added token: not the start of the text.
  // "a  b" -> "▁a▁▁b" -> pieces "▁a", "▁▁b" -> [▁a], [▁, ▁, b].
  EXPECT_EQ(first.encode("a  b"), (Ids{262, 259, 259, 261}));
  EXPECT_EQ(first.decode({262, 259, 259, 261}), "a  b");
  EXPECT_EQ(first.decode({259, 260}), "a");
  BpeTokenizer always(char_bpe_document(json(), metaspace("always"), metaspace("always"), true, true), "a.json");
  EXPECT_EQ(always.encode("<s>ab"), (Ids{1, 264}));
  BpeTokenizer never(char_bpe_document(json(), metaspace("never"), metaspace("never"), true, true), "n.json");
  EXPECT_EQ(never.encode("ab"), (Ids{263}));
}

// ignore_merges: a word that is a vocabulary entry is that id, found by its text ("\n" here, not the <0x0A> byte).
TEST(CharBpe, IgnoreMergesTakesWholeWords) {
  const json never = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}};
  json document = char_bpe_document(json(), never, never, true, true);
  document["model"]["vocab"]["bab"] = 265;
  document["model"]["vocab"]["\n"] = 266;
  EXPECT_EQ(BpeTokenizer(document, "merging.json").encode("bab"), (Ids{261, 263}));  // b a b -> (a,b) r1.
  document["model"]["ignore_merges"] = true;
  BpeTokenizer whole(document, "whole.json");
  EXPECT_EQ(whole.encode("bab"), (Ids{265}));
  EXPECT_EQ(whole.encode("\n"), (Ids{266}));
  EXPECT_EQ(whole.encode("ba"), (Ids{261, 260}));
}

// Added tokens with normalized true are matched in the normalized text by their normalized content, and (as in
// tokenizers 0.23) decoded from it.
TEST(CharBpe, NormalizedAddedTokens) {
  json document = char_bpe_document(json{{"type", "Lowercase"}}, json(), json{{"type", "Fuse"}}, true, true);
  document["added_tokens"].push_back({{"id", 265}, {"content", "AB"}, {"normalized", true}, {"special", false}});
  BpeTokenizer tokenizer(document, "normalized.json");
  EXPECT_EQ(tokenizer.encode("bAB"), (Ids{261, 265}));  // "bab": "b", then "ab" is the added token.
  EXPECT_EQ(tokenizer.decode({261, 265}), "bab");
}

TEST(CharBpe, RefusedPartsAreNamedWithTheFile) {
  json document = char_bpe_document(json{{"type", "BertNormalizer"}}, json(), json(), true, true);
  EXPECT_EQ(input_error_of([&] { BpeTokenizer(document, "x.json"); }),
            "x.json: normalizer type 'BertNormalizer' is not supported");
  document["normalizer"] = nullptr;
  document["decoder"] = {{"type", "CTC"}};
  EXPECT_EQ(input_error_of([&] { BpeTokenizer(document, "x.json"); }), "x.json: decoder type 'CTC' is not supported");
  document["decoder"] = nullptr;
  document["model"]["continuing_subword_prefix"] = "##";
  EXPECT_NE(input_error_of([&] { BpeTokenizer(document, "x.json"); }).find("continuing_subword_prefix"),
            std::string::npos);
}

TEST(Tokenizer, TokenIdFindsSpecialsThenBytes) {
  ByteTokenizer bytes;
  EXPECT_EQ(bytes.token_id("<|eos|>"), 257);
  EXPECT_EQ(bytes.token_id("a"), 97);
  EXPECT_EQ(bytes.token_id("ab"), std::nullopt);
  auto bpe = load_tokenizer(fixture("tiny_bpe_gpt2_split.json"));
  EXPECT_EQ(bpe->token_id("<|endoftext|>"), 267);
  EXPECT_EQ(bpe->token_id(" the"), 258);
}

}  // namespace
}  // namespace inkstone
