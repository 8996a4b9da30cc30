// `data prepare`: documents from text, JSONL and fortune files, the validation split, shard roll-over, input
// errors, the fortunes preset end to end, and the progress line it prints.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/errors.h"
#include "core/progress.h"
#include "dataset/data_prepare.h"
#include "dataset/window_loader.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

// Bytes as ids 0..255, specials 256..259 like the byte tokenizer; it records what it was asked to encode and,
// when told to, maps 'X' to an id outside its vocabulary.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(int32_t vocab_size = 260, bool x_out_of_range = false)
      : vocab_size_(vocab_size), x_out_of_range_(x_out_of_range) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    pieces.emplace_back(text);
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(x_out_of_range_ && c == 'X' ? vocab_size_ : c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id < 256) text += static_cast<char>(id);
    }
    return text;
  }
  std::string token_bytes(int32_t id) const override { return std::string(1, static_cast<char>(id)); }
  int32_t vocab_size() const override { return vocab_size_; }
  const SpecialTokens& specials() const override { return specials_; }
  bool is_special(int32_t id) const override { return id >= 256; }
  std::string kind() const override { return "fake"; }
  nlohmann::json to_json() const override { return {{"fake", vocab_size_}}; }

  mutable std::vector<std::string> pieces;

 private:
  int32_t vocab_size_;
  bool x_out_of_range_;
  SpecialTokens specials_{256, 257, 258, 259};
};

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The documents of one split, in order, as text.
std::vector<std::string> split_documents(const fs::path& dir, const std::string& split) {
  const Manifest manifest = read_manifest(dir);
  SplitTokens tokens(dir, manifest, split, /*verify=*/true);
  std::vector<int32_t> ids(static_cast<size_t>(tokens.size()));
  tokens.read(0, tokens.size(), ids.data());
  std::vector<std::string> documents(1);
  for (int32_t id : ids) {
    if (id == manifest.eos) {
      documents.emplace_back();
    } else {
      documents.back() += static_cast<char>(id);
    }
  }
  documents.pop_back();  // after the last eos
  return documents;
}

PrepareOptions options_for(std::vector<fs::path> inputs, const fs::path& out, InputFormat format = InputFormat::text,
                           double val_fraction = 0.0) {
  PrepareOptions options;
  options.inputs = std::move(inputs);
  options.out_dir = out;
  options.format = format;
  options.val_fraction = val_fraction;
  return options;
}

using testing::input_error_of;

TEST(PrepareText, AFolderGivesOneDocumentPerFileInSortedOrder) {
  const auto dir = testing::temp_dir("prepare_folder");
  write_text(dir / "in" / "b.txt", "bb");
  write_text(dir / "in" / "a.txt", "a");
  write_text(dir / "in" / "sub" / "c.txt", "ccc");
  write_text(dir / "in" / "empty.txt", "");
  write_text(dir / "in" / ".hidden", "zz");
  write_text(dir / "in" / ".git" / "d.txt", "dd");
  FakeTokenizer tokenizer;
  const PrepareSummary summary = prepare_data(options_for({dir / "in"}, dir / "out"), tokenizer);

  EXPECT_EQ(split_documents(dir / "out", "train"), (std::vector<std::string>{"a", "bb", "ccc"}));
  const Manifest& m = summary.manifest;
  EXPECT_EQ(m.tokenizer_kind, "fake");
  EXPECT_EQ(m.tokenizer_fingerprint, tokenizer.fingerprint());
  EXPECT_EQ(m.vocab_size, 260);
  EXPECT_EQ(m.eos, 257);
  EXPECT_EQ(m.pad, 258);
  EXPECT_EQ(m.dtype, TokenDtype::uint16);
  EXPECT_EQ(m.splits.at("train").documents, 3);
  EXPECT_EQ(m.splits.at("train").tokens, 9);
  EXPECT_EQ(m.splits.at("train").text_bytes, 6);
  EXPECT_EQ(m.splits.at("val").documents, 0);
  EXPECT_TRUE(m.splits.at("val").shards.empty());
  EXPECT_EQ(summary.input_bytes, 6);
  EXPECT_EQ(manifest_to_json(read_manifest(dir / "out")), manifest_to_json(m));
  std::ifstream saved(dir / "out" / "tokenizer.json");
  EXPECT_EQ(nlohmann::json::parse(saved), tokenizer.to_json());
}

TEST(PrepareText, ALargeDocumentIsEncodedInPiecesCutAtCharacterBoundaries) {
  const auto dir = testing::temp_dir("prepare_pieces");
  std::string text;
  for (int i = 0; i < 20; ++i) text += "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \xf0\x9f\x98\x80" + std::string(i % 3 == 0 ? "\n" : "");
  write_text(dir / "big.txt", text);
  FakeTokenizer tokenizer;
  PrepareOptions options = options_for({dir / "big.txt"}, dir / "out");
  options.chunk_bytes = 7;
  prepare_data(options, tokenizer);

  EXPECT_EQ(split_documents(dir / "out", "train"), std::vector<std::string>{text});
  ASSERT_GT(tokenizer.pieces.size(), 10u);
  for (const auto& piece : tokenizer.pieces) {
    ASSERT_FALSE(piece.empty());
    EXPECT_NE(static_cast<unsigned char>(piece[0]) & 0xC0, 0x80) << "piece starts inside a character: " << piece;
  }
}

TEST(PrepareSplits, DocumentsAreSplitDisjointlyAndDeterministically) {
  const auto dir = testing::temp_dir("prepare_splits");
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i) {
    texts.push_back(fmt::format("document {} says {}", i, i * i));
    jsonl += nlohmann::json{{"text", texts.back()}}.dump() + "\n";
  }
  write_text(dir / "docs.jsonl", jsonl);
  FakeTokenizer tokenizer;
  const auto options = options_for({dir / "docs.jsonl"}, dir / "out", InputFormat::jsonl, 0.1);
  const PrepareSummary summary = prepare_data(options, tokenizer);

  const auto train = split_documents(dir / "out", "train");
  const auto val = split_documents(dir / "out", "val");
  EXPECT_EQ(train.size() + val.size(), 400u);
  const std::set<std::string> train_set(train.begin(), train.end()), val_set(val.begin(), val.end());
  for (const auto& text : val) EXPECT_EQ(train_set.count(text), 0u) << text;
  // Each document is where the documented rule puts it; documents 0 and 1 are pinned.
  for (int i = 0; i < 400; ++i) {
    EXPECT_EQ(val_set.count(texts[i]), is_validation_document(texts[i], i, 0.1) ? 1u : 0u) << i;
  }
  EXPECT_EQ(val_set.count(texts[0]), 0u);
  EXPECT_EQ(val_set.count(texts[1]), 1u);
  EXPECT_GT(val.size(), 20u);
  EXPECT_LT(val.size(), 70u);
  EXPECT_EQ(summary.manifest.val_fraction, 0.1);
  EXPECT_FALSE(summary.manifest.val_rule.empty());

  // A second run gives byte-identical shards.
  auto again = options;
  again.out_dir = dir / "again";
  EXPECT_EQ(manifest_to_json(prepare_data(again, tokenizer).manifest), manifest_to_json(summary.manifest));
}

TEST(PrepareSplits, TwoDocumentsGiveOneOfEach) {
  const auto dir = testing::temp_dir("prepare_two");
  write_text(dir / "a.txt", "first");
  write_text(dir / "b.txt", "second");
  FakeTokenizer tokenizer;
  prepare_data(options_for({dir / "a.txt", dir / "b.txt"}, dir / "out", InputFormat::text, 0.05), tokenizer);
  EXPECT_EQ(split_documents(dir / "out", "train"), std::vector<std::string>{"first"});
  EXPECT_EQ(split_documents(dir / "out", "val"), std::vector<std::string>{"second"});
}

// The last fraction of a text file, from a line start, is validation — also when read in many small pieces.
TEST(PrepareSplits, TailSplitCutsEachFileAtALineStart) {
  const auto dir = testing::temp_dir("prepare_tail");
  std::string text;
  for (int i = 0; i < 100; ++i) text += fmt::format("line {:03}\n", i);  // 9 bytes a line
  write_text(dir / "one.txt", text);
  for (int64_t chunk : {int64_t{1} << 20, int64_t{20}, int64_t{4}}) {
    FakeTokenizer tokenizer;
    PrepareOptions options = options_for({dir / "one.txt"}, dir / "out", InputFormat::text, 0.1);
    options.val_split = ValSplit::tail;
    options.chunk_bytes = chunk;
    const auto summary = prepare_data(options, tokenizer);
    // The cut is at byte ceil(0.9 * 900) = 810, a line start: lines 90..99 are validation.
    EXPECT_EQ(split_documents(dir / "out", "train"), std::vector<std::string>{text.substr(0, 810)}) << chunk;
    EXPECT_EQ(split_documents(dir / "out", "val"), std::vector<std::string>{text.substr(810)}) << chunk;
    EXPECT_NE(summary.manifest.val_rule.find("last fraction"), std::string::npos);
  }
  PrepareOptions jsonl = options_for({dir / "one.txt"}, dir / "bad", InputFormat::jsonl, 0.1);
  jsonl.val_split = ValSplit::tail;
  FakeTokenizer tokenizer;
  EXPECT_NE(input_error_of([&] { prepare_data(jsonl, tokenizer); }).find("--val-split tail"), std::string::npos);
}

TEST(PrepareJsonl, ReadsTheNamedFieldAndNamesTheBadLine) {
  const auto dir = testing::temp_dir("prepare_jsonl");
  write_text(dir / "ok.jsonl", "{\"body\": \"one\"}\n\n{\"body\": \"two\", \"n\": 2}\r\n");
  FakeTokenizer tokenizer;
  auto options = options_for({dir / "ok.jsonl"}, dir / "out", InputFormat::jsonl);
  options.jsonl_field = "body";
  prepare_data(options, tokenizer);
  EXPECT_EQ(split_documents(dir / "out", "train"), (std::vector<std::string>{"one", "two"}));

  write_text(dir / "bad.jsonl", "{\"body\": \"one\"}\n{\"text\": \"two\"}\n");
  options.inputs = {dir / "bad.jsonl"};
  EXPECT_EQ(input_error_of([&] { prepare_data(options, tokenizer); }),
            (dir / "bad.jsonl").string() + ":2: no string field 'body'");
  write_text(dir / "bad.jsonl", "{\"body\": \n");
  EXPECT_EQ(input_error_of([&] { prepare_data(options, tokenizer); }), (dir / "bad.jsonl").string() + ":1: not valid JSON");
}

// The loss mask of one split, in token order.
std::vector<uint8_t> split_loss_mask(const fs::path& dir, const std::string& split) {
  const Manifest manifest = read_manifest(dir);
  SplitTokens tokens(dir, manifest, split, /*verify=*/true);
  std::vector<uint8_t> mask(static_cast<size_t>(tokens.size()));
  tokens.read_loss_mask(0, tokens.size(), mask.data());
  return mask;
}

std::vector<uint8_t> bits(const std::string& text) {
  std::vector<uint8_t> out;
  for (char c : text) out.push_back(c == '1');
  return out;
}

TEST(PrepareChat, ConversationsCarryALossMaskOnTheirResponses) {
  const auto dir = testing::temp_dir("prepare_chat");
  write_text(dir / "chat.jsonl",
             "{\"prompt\": \"2+2=\", \"response\": \"4\"}\n"
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
             "\"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"?\"}, {\"role\": \"assistant\", "
             "\"content\": \"!\"}]}\n");
  FakeTokenizer tokenizer;
  auto options = options_for({dir / "chat.jsonl"}, dir / "out", InputFormat::chat);
  const Manifest m = prepare_data(options, tokenizer).manifest;
  EXPECT_EQ(split_documents(dir / "out", "train"), (std::vector<std::string>{"2+2=4", "hiyo?!"}));
  // "2+2=" | "4" eos, then "hi" | "yo" | "?" | "!" eos.
  EXPECT_EQ(split_loss_mask(dir / "out", "train"), bits("0000110011011"));
  EXPECT_TRUE(m.loss_mask);
  EXPECT_EQ(m.splits.at("train").tokens, 13);
  EXPECT_EQ(m.splits.at("train").trained_tokens, 6);
  EXPECT_EQ(m.splits.at("train").text_bytes, 11);
  EXPECT_EQ(m.splits.at("train").trained_bytes, 4);  // "4", "yo", "!": bits per byte of what is scored
  ASSERT_TRUE(m.chat.has_value());
  EXPECT_EQ(m.chat->format, "raw");
  EXPECT_EQ(manifest_to_json(read_manifest(dir / "out")), manifest_to_json(m));

  EXPECT_EQ(manifest_to_json(m).at("format_version"), kMaskedShardFormatVersion);

  // Windows carry the mask: pad mode gives each conversation its own row, led by the eos its prompt starts from
  // (context), padding untrained; the second conversation (1 + 7 tokens) fills its window exactly.
  WindowLoaderOptions window;
  window.window_len = 8;
  window.mode = WindowMode::pad;
  const WindowLoader loader(dir / "out", window);
  ASSERT_EQ(loader.num_eval_windows(), 2);
  const TokenBatch batch = loader.eval_batch(0, 2);
  const int32_t eos = tokenizer.specials().eos;
  EXPECT_EQ(batch.tokens[0], eos);
  EXPECT_EQ(batch.tokens[8], eos);
  EXPECT_EQ(batch.real, bits("11111110" "11111111"));
  EXPECT_EQ(batch.trained, bits("00000110" "00011011"));
  EXPECT_EQ(batch.conversations, bits("11"));
  // A window one token shorter cuts the second conversation after its leading eos and six tokens.
  window.window_len = 7;
  const WindowLoader shorter(dir / "out", window);
  ASSERT_EQ(shorter.num_eval_windows(), 3);
  EXPECT_EQ(shorter.eval_batch(1, 2).trained, bits("0001101" "1000000"));

  options.train_on_all = true;
  prepare_data(options, tokenizer);
  EXPECT_EQ(split_loss_mask(dir / "out", "train"), bits("1111111111111"));
}

// --split-turns: the two-turn conversation becomes "hiyo" (trained on "yo") and "hiyo?!" (trained on "!" alone,
// "yo" now context), both in the split of their conversation; the manifest counts no conversation trained twice.
TEST(PrepareChat, SplitTurnsWriteOneConversationPerResponse) {
  const auto dir = testing::temp_dir("prepare_chat_turns");
  write_text(dir / "chat.jsonl",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
             "\"content\": \"yo\"}, {\"role\": \"user\", \"content\": \"?\"}, {\"role\": \"assistant\", "
             "\"content\": \"!\"}]}\n");
  FakeTokenizer tokenizer;
  auto options = options_for({dir / "chat.jsonl"}, dir / "out", InputFormat::chat);
  EXPECT_EQ(prepare_data(options, tokenizer).manifest.chat->multi_response_conversations, 1);
  options.split_turns = true;
  const Manifest m = prepare_data(options, tokenizer).manifest;
  EXPECT_EQ(m.chat->multi_response_conversations, 0);
  EXPECT_EQ(split_documents(dir / "out", "train"), (std::vector<std::string>{"hiyo", "hiyo?!"}));
  EXPECT_EQ(split_loss_mask(dir / "out", "train"), bits("00111" "0000011"));
  EXPECT_EQ(m.splits.at("train").trained_bytes, 3);
}

TEST(PrepareChat, MalformedConversationsNameTheLineAndTheKey) {
  const auto dir = testing::temp_dir("prepare_chat_bad");
  FakeTokenizer tokenizer;
  const auto refusal = [&](const std::string& line) {
    write_text(dir / "bad.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n" + line + "\n");
    return input_error_of([&] {
      prepare_data(options_for({dir / "bad.jsonl"}, dir / "out", InputFormat::chat), tokenizer);
    });
  };
  const std::string at = (dir / "bad.jsonl").string() + ":2: ";
  EXPECT_EQ(refusal("{\"messages\": [{\"role\": \"bot\", \"content\": \"x\"}]}"),
            at + "'messages[0].role' is 'bot' (expected system, user or assistant)");
  EXPECT_EQ(refusal("{\"messages\": [{\"role\": \"user\", \"content\": 3}]}"),
            at + "'messages[0].content' must be a string");
  EXPECT_EQ(refusal("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}"),
            at + "the conversation has no assistant message to train on");
  EXPECT_EQ(refusal("{\"prompt\": \"x\"}"), at + "'prompt' without 'response' (or 'completion')");
  EXPECT_EQ(refusal("{\"text\": \"x\"}"), at + "a conversation needs 'messages' or 'prompt' and 'response'");
  EXPECT_EQ(refusal("[1]"), at + "a conversation must be a JSON object");
}

TEST(PrepareChat, AMessageHoldingATurnMarkerIsRefused) {
  const auto dir = testing::temp_dir("prepare_chat_marker");
  write_text(dir / "chat.jsonl", "{\"prompt\": \"a<|im_end|>b\", \"response\": \"c\"}\n");
  FakeTokenizer tokenizer;
  auto options = options_for({dir / "chat.jsonl"}, dir / "out", InputFormat::chat);
  options.chat.format = ChatFormat::chatml;
  EXPECT_EQ(input_error_of([&] { prepare_data(options, tokenizer); }),
            (dir / "chat.jsonl").string() + ":1: 'prompt' holds '<|im_end|>', which marks turns in this chat format");
  options.chat.format = ChatFormat::raw;  // raw marks no turns: the text is the user's
  EXPECT_NO_THROW(prepare_data(options, tokenizer));
}

TEST(PrepareChat, ADamagedLossMaskIsRefusedByFile) {
  const auto dir = testing::temp_dir("prepare_chat_damaged");
  write_text(dir / "chat.jsonl", "{\"prompt\": \"ab\", \"response\": \"cd\"}\n");
  FakeTokenizer tokenizer;
  prepare_data(options_for({dir / "chat.jsonl"}, dir / "out", InputFormat::chat), tokenizer);
  const auto mask = dir / "out" / "train_00000.mask";
  write_text(mask, std::string("\x00\x00\x02\x01\x01", 5));
  const Manifest manifest = read_manifest(dir / "out");
  EXPECT_NE(input_error_of([&] { SplitTokens(dir / "out", manifest, "train", true); }).find(mask.string() + ": checksum mismatch"),
            std::string::npos);
  write_text(mask, std::string("\x00\x01", 2));
  EXPECT_EQ(input_error_of([&] { SplitTokens(dir / "out", manifest, "train", false); }),
            mask.string() + ": 2 bytes but its shard holds 5 tokens (one mask byte each)");
}

TEST(PrepareInputs, MissingEmptyOrDocumentlessInputsAreInputErrors) {
  const auto dir = testing::temp_dir("prepare_inputs");
  FakeTokenizer tokenizer;
  EXPECT_EQ(input_error_of([&] { prepare_data(options_for({}, dir / "out"), tokenizer); }),
            "no inputs given (--input PATH...)");
  EXPECT_EQ(input_error_of([&] { prepare_data(options_for({dir / "nope.txt"}, dir / "out"), tokenizer); }),
            "input " + (dir / "nope.txt").string() + " not found");
  write_text(dir / "empty.txt", "");
  EXPECT_EQ(input_error_of([&] { prepare_data(options_for({dir / "empty.txt"}, dir / "out"), tokenizer); }),
            "input file " + (dir / "empty.txt").string() + " is empty");
  fs::create_directories(dir / "hollow");
  EXPECT_EQ(input_error_of([&] { prepare_data(options_for({dir / "hollow"}, dir / "out"), tokenizer); }),
            "input folder " + (dir / "hollow").string() + " holds no files");
  write_text(dir / "blank.jsonl", "{\"text\": \"\"}\n");
  EXPECT_EQ(input_error_of([&] {
              prepare_data(options_for({dir / "blank.jsonl"}, dir / "out", InputFormat::jsonl), tokenizer);
            }),
            "no documents in the 1 input file(s)");
  EXPECT_FALSE(fs::exists(dir / "out" / "manifest.json"));
}

TEST(PrepareIds, AnIdOutsideTheVocabularyNamesTheInputFile) {
  const auto dir = testing::temp_dir("prepare_ids");
  write_text(dir / "a.txt", "abcXdef");
  FakeTokenizer tokenizer(260, /*x_out_of_range=*/true);
  EXPECT_EQ(input_error_of([&] { prepare_data(options_for({dir / "a.txt"}, dir / "out"), tokenizer); }),
            (dir / "a.txt").string() + ": token id 260 is outside the vocabulary of 260 ids");
  EXPECT_FALSE(fs::exists(dir / "out" / "manifest.json"));
}

TEST(PrepareShards, RollOverAtTheSizeLimitAndWidenForLargeVocabularies) {
  const auto dir = testing::temp_dir("prepare_rollover");
  std::string jsonl;
  for (int i = 0; i < 10; ++i) jsonl += nlohmann::json{{"text", "abcd"}}.dump() + "\n";
  write_text(dir / "docs.jsonl", jsonl);
  FakeTokenizer tokenizer(70000);
  auto options = options_for({dir / "docs.jsonl"}, dir / "out", InputFormat::jsonl);
  options.max_shard_tokens = 12;
  const Manifest m = prepare_data(options, tokenizer).manifest;
  EXPECT_EQ(m.dtype, TokenDtype::uint32);
  const SplitInfo& train = m.splits.at("train");
  ASSERT_EQ(train.shards.size(), 4u);  // 5 tokens a document: 3 + 3 + 3 + 1 documents
  EXPECT_EQ(train.shards[0].documents, 3);
  EXPECT_EQ(train.shards[3].documents, 1);
  EXPECT_EQ(fs::file_size(dir / "out" / "train_00000.bin"), 15u * 4);
  EXPECT_EQ(split_documents(dir / "out", "train"), std::vector<std::string>(10, "abcd"));

  // A second prepare into the same folder removes the shards it no longer needs.
  options.max_shard_tokens = 1000;
  prepare_data(options, tokenizer);
  EXPECT_FALSE(fs::exists(dir / "out" / "train_00001.bin"));
}

TEST(PrepareFortunes, EntriesBetweenPercentLinesAreDocuments) {
  const auto dir = testing::temp_dir("prepare_fortune_format");
  write_text(dir / "f", "one\n%\ntwo\n  lines\n%\n%\nthree\n");
  FakeTokenizer tokenizer;
  prepare_data(options_for({dir / "f"}, dir / "out", InputFormat::fortune), tokenizer);
  EXPECT_EQ(split_documents(dir / "out", "train"), (std::vector<std::string>{"one\n", "two\n  lines\n", "three\n"}));
}

TEST(PrepareFortunes, TheEnglishFilesAreThoseWithADatSibling) {
  const auto dir = testing::temp_dir("prepare_fortune_files");
  for (const char* name : {"art", "art.dat", "art.u8", "zen", "zen.dat", "notes", "off/rude", "off/rude.dat",
                           "de/witze", "de/witze.dat"}) {
    write_text(dir / name, "x\n");
  }
  EXPECT_EQ(fortune_files(dir), (std::vector<fs::path>{dir / "art", dir / "zen"}));
  EXPECT_EQ(input_error_of([&] { fortune_files(dir / "missing"); }),
            "fortunes folder " + (dir / "missing").string() + " not found; install the corpus with: apt-get install "
                                                              "fortunes");
}

TEST(PrepareFortunes, PresetPreparesTheSystemCorpusEndToEnd) {
  if (!fs::is_directory(kFortunesFolder)) GTEST_SKIP() << kFortunesFolder << " is absent (apt-get install fortunes)";
  const auto dir = testing::temp_dir("prepare_fortunes_preset");
  PrepareOptions options = fortunes_preset();
  options.out_dir = dir;
  const auto tokenizer = load_tokenizer("byte");
  const Manifest m = prepare_data(options, *tokenizer).manifest;

  const SplitInfo& train = m.splits.at("train");
  const SplitInfo& val = m.splits.at("val");
  EXPECT_GT(train.documents, 1000);
  const double val_share = static_cast<double>(val.documents) / (train.documents + val.documents);
  EXPECT_GT(val_share, 0.03);
  EXPECT_LT(val_share, 0.07);
  // Byte tokens: one per byte plus an eos per document.
  EXPECT_EQ(train.tokens, train.text_bytes + train.documents);
  EXPECT_EQ(val.tokens, val.text_bytes + val.documents);

  WindowLoaderOptions loader_options;
  loader_options.split = "val";
  loader_options.mode = WindowMode::pad;
  loader_options.window_len = 128;
  loader_options.expected_tokenizer_fingerprint = tokenizer->fingerprint();
  WindowLoader loader(dir, loader_options);
  EXPECT_EQ(loader.total_documents(), val.documents);
  const TokenBatch batch = loader.train_batch(0, 2);
  const std::vector<int32_t> first_row(batch.tokens.begin(), batch.tokens.begin() + batch.cols);
  EXPECT_FALSE(tokenizer->decode(first_row).empty());
}

TEST(PrepareProgress, PrintsPlainLinesWhenNotATerminal) {
  std::FILE* out = std::tmpfile();
  ProgressBar bar("read", 1000, ProgressBar::Unit::bytes, out, /*plain_every_s=*/0.0);
  bar.update(500, "7 docs");
  bar.finish(1000);
  std::rewind(out);
  char buffer[512] = {};
  const size_t n = std::fread(buffer, 1, sizeof buffer - 1, out);
  std::fclose(out);
  const std::string text(buffer, n);
  const auto newline = text.find('\n');
  ASSERT_NE(newline, std::string::npos);
  const std::string first = text.substr(0, newline), second = text.substr(newline + 1);
  EXPECT_EQ(first.rfind("read  50% 500 B/1.00 kB ", 0), 0u) << first;
  EXPECT_NE(first.find(" ETA "), std::string::npos) << first;
  EXPECT_EQ(first.substr(first.size() - 9), " | 7 docs");
  EXPECT_EQ(second.rfind("read 100% 1.00 kB/1.00 kB ", 0), 0u) << second;
  EXPECT_EQ(second.find(" ETA "), std::string::npos) << second;
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(PrepareProgress, HumanReadableNumbers) {
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(12345), "12.3k");
  EXPECT_EQ(human_count(1234567), "1.23M");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(2800000), "2.80 MB");
  EXPECT_EQ(human_duration(65), "1:05");
  EXPECT_EQ(human_duration(3725), "1:02:05");
}

}  // namespace
}  // namespace inkstone
