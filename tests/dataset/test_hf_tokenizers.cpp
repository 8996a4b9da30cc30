// Tokenizers against golden ids and texts from Hugging Face's tokenizers (tests/dataset/fixtures/tokenizer_cases.json,
// which records the package versions that made it): encode, decode with and without specials, and the same after
// a to_json() round trip, for byte-level BPE (Qwen3, GPT-2, tiny Qwen-style and NFKC + Lowercase files) and
// SentencePiece-style BPE with byte fallback (Llama-2 style normalizer, Metaspace pre-tokenizer).
#include <gtest/gtest.h>

#include <zstd.h>

#include <fstream>
#include <functional>
#include <memory>

#include <fmt/format.h>
#include <sstream>

#include "core/errors.h"
#include "dataset/tokenizer.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::filesystem::path fixtures_dir() { return testing::source_dir() / "tests" / "dataset" / "fixtures"; }

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw std::runtime_error("cannot read " + file.string());
  return text.str();
}

std::string zstd_decompress(const std::string& compressed) {
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> stream(ZSTD_createDStream(), ZSTD_freeDStream);
  ZSTD_initDStream(stream.get());
  std::string out;
  std::vector<char> buffer(ZSTD_DStreamOutSize());
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  ZSTD_outBuffer chunk{};
  do {
    chunk = {buffer.data(), buffer.size(), 0};
    const size_t status = ZSTD_decompressStream(stream.get(), &chunk, &in);
    if (ZSTD_isError(status)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(status));
    out.append(buffer.data(), chunk.pos);
  } while (in.pos < in.size || chunk.pos == chunk.size);
  return out;
}

std::unique_ptr<Tokenizer> load_fixture(const std::filesystem::path& file) {
  const std::string text = read_file(file);
  const json document = json::parse(file.extension() == ".zst" ? zstd_decompress(text) : text);
  return tokenizer_from_json(document, file.string());
}

const json& cases() {
  static const json document = json::parse(read_file(fixtures_dir() / "tokenizer_cases.json"));
  return document;
}

class HfTokenizerCases : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerCases, EncodeAndDecodeMatchGoldenFile) {
  ASSERT_TRUE(cases().at("tokenizers").contains(GetParam())) << "tokenizer_cases.json lacks " << GetParam();
  const json& entry = cases().at("tokenizers").at(GetParam());
  const auto file = fixtures_dir() / entry.at("file").get<std::string>();
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  const auto tokenizer = load_fixture(file);
  const auto reloaded = tokenizer_from_json(tokenizer->to_json(), "reloaded " + GetParam());
  EXPECT_EQ(reloaded->to_json(), tokenizer->to_json());
  const json& strings = cases().at("strings");
  for (size_t i = 0; i < strings.size(); ++i) {
    const auto text = strings[i].get<std::string>();
    const auto ids = entry.at("ids")[i].get<Ids>();
    SCOPED_TRACE(GetParam() + " string " + std::to_string(i) + ": " + text);
    EXPECT_EQ(tokenizer->encode(text), ids);
    EXPECT_EQ(reloaded->encode(text), ids);
    EXPECT_EQ(tokenizer->decode(ids, /*keep_special=*/false), entry.at("decoded")[i].get<std::string>());
    EXPECT_EQ(tokenizer->decode(ids, /*keep_special=*/true), entry.at("decoded_keep_special")[i].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfTokenizerCases,
                         ::testing::Values("qwen3", "gpt2", "tiny_qwen_style", "tiny_metaspace",
                                           "tiny_metaspace_prepend", "tiny_nfkc_lower"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Qwen3's chat markers are added tokens found by their text, and its file names no roles, so bos / eos come from
// the names it has (<|endoftext|>) and pad / mask are appended after the last added token.
TEST(HfTokenizers, Qwen3TokenIdsAndSpecials) {
  const auto qwen = load_fixture(fixtures_dir() / "qwen3_tokenizer.json.zst");
  EXPECT_EQ(qwen->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(qwen->token_id("<think>"), 151667);
  EXPECT_EQ(qwen->token_id("no such token"), std::nullopt);
  EXPECT_EQ(qwen->specials().eos, 151643);
  EXPECT_EQ(qwen->specials().pad, 151669);
  EXPECT_EQ(qwen->specials().mask, 151670);
  EXPECT_EQ(qwen->encode("<|im_start|>"), (Ids{151644}));
}

// With inkstone_special_roles the roles are the named added tokens, a null role is none, nothing is appended,
// and the object survives a save.
TEST(HfTokenizers, SpecialRolesFromTheDocument) {
  json document = json::parse(zstd_decompress(read_file(fixtures_dir() / "qwen3_tokenizer.json.zst")));
  document["inkstone_special_roles"] = {{"bos", nullptr}, {"eos", "<|im_end|>"}, {"pad", "<|endoftext|>"},
                                        {"mask", nullptr}};
  const auto qwen = tokenizer_from_json(document, "qwen3 with roles");
  EXPECT_EQ(qwen->specials().bos, -1);
  EXPECT_EQ(qwen->specials().eos, 151645);
  EXPECT_EQ(qwen->specials().pad, 151643);
  EXPECT_EQ(qwen->specials().mask, -1);
  EXPECT_EQ(qwen->vocab_size(), 151669);
  const auto reloaded = tokenizer_from_json(qwen->to_json(), "reloaded");
  EXPECT_EQ(reloaded->specials().eos, 151645);
  EXPECT_EQ(reloaded->specials().mask, -1);
  EXPECT_EQ(reloaded->fingerprint(), qwen->fingerprint());

  document["inkstone_special_roles"]["mask"] = "<|mask|>";
  try {
    tokenizer_from_json(document, "qwen3 with a bad role");
    FAIL() << "no throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("mask '<|mask|>' is not an added token"), std::string::npos) << e.what();
  }
}

}  // namespace
// Ids past the vocabulary must all be added tokens, so a huge id is refused before anything is sized by it.
TEST(HfTokenizers, AnAddedTokenIdFarBeyondTheVocabularyIsRefused) {
  json document = json::parse(zstd_decompress(read_file(fixtures_dir() / "qwen3_tokenizer.json.zst")));
  document["added_tokens"][0]["id"] = 2000000000;
  try {
    tokenizer_from_json(document, "qwen3 with a huge id");
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("added token id 2000000000 is beyond the vocabulary"), std::string::npos)
        << e.what();
  }
}

// What reading `original` after `damage` is refused with; "accepted" when it is not.
std::string refusal_after(const json& original, const std::function<void(json&)>& damage) {
  json document = original;
  damage(document);
  try {
    tokenizer_from_json(document, "tiny");
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return "accepted";
}

// Ids must be integers in [0, 2^31) given once: the JSON library would wrap 2^62 to 0 and truncate 3.5 to 3, and
// two entries of one id would make one of them undecodable.
TEST(HfTokenizers, TokenIdsThatAreNotOneIntegerEachAreRefusedByName) {
  const json original = json::parse(read_file(fixtures_dir() / "tiny_metaspace_tokenizer.json"));
  const auto refusal = [&](const std::function<void(json&)>& damage) { return refusal_after(original, damage); };
  auto& vocab = original.at("model").at("vocab");
  const std::string first = vocab.begin().key(), second = std::next(vocab.begin()).key();
  EXPECT_NE(refusal([&](json& d) { d["model"]["vocab"][first] = int64_t{1} << 62; })
                .find("vocabulary id of '" + first + "' must be a token id, an integer in [0, 2147483647], found "
                      "4611686018427387904"),
            std::string::npos);
  EXPECT_NE(refusal([&](json& d) { d["model"]["vocab"][first] = 3.5; }).find("found 3.5"), std::string::npos);
  const int32_t id = vocab.at(first).get<int32_t>();
  // The largest id and the count stay as they were, so only the repeat (and the gap it leaves) is wrong.
  const std::string repeated = refusal([&](json& d) { d["model"]["vocab"][second] = id; });
  EXPECT_NE(repeated.find(fmt::format("vocabulary id {} is given to", id)), std::string::npos) << repeated;
  if (!original.value("added_tokens", json::array()).empty())
    EXPECT_NE(refusal([&](json& d) { d["added_tokens"][0]["id"] = 2.5; }).find("added token id must be a token id"),
              std::string::npos);
}

// A fault deep inside the normalizer or an added token is named by its whole path in the file.
TEST(HfTokenizers, AFaultInsideANestedObjectIsNamedByItsWholePath) {
  const json original = json::parse(read_file(fixtures_dir() / "tiny_metaspace_tokenizer.json"));
  const auto refusal = [&](const std::function<void(json&)>& damage) { return refusal_after(original, damage); };
  EXPECT_EQ(refusal([](json& d) { d["added_tokens"][1]["content"] = 5; }),
            "tiny: malformed tokenizer.json: key 'added_tokens/1/content' must be a string, not a number");
  EXPECT_EQ(refusal([](json& d) { d["normalizer"]["normalizers"][0]["prepend"] = true; }),
            "tiny: malformed tokenizer.json: key 'normalizer/normalizers/0/prepend' must be a string, not a boolean");
}

// A byte-level vocabulary read with `pre_tokenizer: null` is a character vocabulary without unk or byte fallback:
// like Hugging Face it drops what it lacks (the space, which it spells "Ġ", and a CJK character), but it counts the
// bytes so that `data prepare` can say so.
TEST(HfTokenizers, BytesWithoutATokenAreCountedWhenLeftOut) {
  json document = json::parse(zstd_decompress(read_file(fixtures_dir() / "qwen3_tokenizer.json.zst")));
  const auto whole = tokenizer_from_json(document, "qwen3");
  EXPECT_EQ(whole->decode(whole->encode("a b\xe4\xb8\xad")), "a b\xe4\xb8\xad");
  EXPECT_EQ(whole->unrepresented_bytes(), 0);
  document["pre_tokenizer"] = nullptr;
  const auto lossy = tokenizer_from_json(document, "qwen3 without its pre-tokenizer");
  for (int repeat = 0; repeat < 2; ++repeat) lossy->encode("a b\xe4\xb8\xad");  // the second is not a cache hit
  EXPECT_EQ(lossy->unrepresented_bytes(), 2 * (1 + 3));
}

}  // namespace inkstone
