// `inkstone tokenizer train | encode | decode | stats`: build a BPE tokenizer and inspect any tokenizer.
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "dataset/bpe_trainer.h"
#include "dataset/data_prepare.h"
#include "dataset/tokenizer.h"
#include "dataset/tokenizer_stats.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

constexpr const char* kSpecHelp = "\"byte\", a tokenizer.json file, or a folder holding tokenizer.json";

std::string read_file_or_throw(const std::string& path) {
  return read_input_file(path, "input file");
}

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;
  std::string preset;  // fortunes: the files `data prepare --preset fortunes` reads
  int32_t vocab = 0;
  std::string out;
  std::vector<std::string> specials;
};

int run_train(const TokenizerTrainOptions& o) {
  std::vector<std::filesystem::path> files(o.inputs.begin(), o.inputs.end());
  if (o.preset == "fortunes") files = fortune_files(kFortunesFolder);
  if (files.empty()) throw InputError("give --input FILE... or --preset fortunes");
  const BpeTrainResult result = train_bpe(files, o.vocab, o.specials);
  const size_t merges = result.tokenizer->merges().size();
  std::filesystem::create_directories(o.out);
  const auto file = std::filesystem::path(o.out) / "tokenizer.json";
  result.tokenizer->save(file);
  fmt::print("counted {} distinct words in {:.1f} MB in {:.2f} s ({:.1f} MB/s)\n", result.distinct_words,
             result.corpus_bytes / 1e6, result.count_seconds, result.corpus_bytes / 1e6 / result.count_seconds);
  fmt::print("learnt {} merges in {:.2f} s ({:.0f} merges/s)\n", merges, result.merge_seconds,
             merges / std::max(result.merge_seconds, 1e-9));
  fmt::print("wrote {} (vocab {}, fingerprint {})\n", file.string(), result.tokenizer->vocab_size(),
             result.tokenizer->fingerprint());
  return 0;
}

int run_encode(const std::string& spec, const std::string* text) {
  const auto tokenizer = load_tokenizer(spec);
  const std::string input =
      text ? *text : std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  fmt::print("{}\n", fmt::join(tokenizer->encode(input), " "));
  return 0;
}

int run_decode(const std::string& spec, const std::vector<std::string>& id_texts) {
  const auto tokenizer = load_tokenizer(spec);
  std::vector<int32_t> ids;
  for (const std::string& t : id_texts) {
    size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || id < INT32_MIN || id > INT32_MAX) throw InputError(fmt::format("'{}' is not a token id", t));
    ids.push_back(static_cast<int32_t>(id));
  }
  fmt::print("{}", tokenizer->decode(ids, /*keep_special=*/true));
  return 0;
}

int run_stats(const std::string& spec, const std::vector<std::string>& files) {
  const auto tokenizer = load_tokenizer(spec);
  TokenizerStats s;
  double encode_seconds = 0;
  for (const std::string& file : files) {
    const std::string text = read_file_or_throw(file);
    const auto start = std::chrono::steady_clock::now();
    tokenizer->encode(text);
    encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.add(tokenizer_stats(text, *tokenizer));
  }
  fmt::print("tokenizer: {} ({}, fingerprint {})\n", spec, tokenizer->kind(), tokenizer->fingerprint());
  fmt::print("vocabulary size: {}\n", tokenizer->vocab_size());
  fmt::print("bytes: {}  tokens: {}  words: {}\n", s.bytes, s.tokens, s.words);
  fmt::print("bytes per token (compression): {:.3f}\n", s.bytes_per_token());
  fmt::print("tokens per word (fertility): {:.3f}\n", s.tokens_per_word());
  fmt::print("single-byte tokens: {:.2f}%\n", 100.0 * s.single_byte_tokens / std::max<double>(s.tokens, 1));
  fmt::print("unigram entropy: {:.3f} bits per byte ({} distinct tokens)\n", s.unigram_bits_per_byte(),
             s.token_counts.size());
  if (s.byte_exact) {
    fmt::print("tokens splitting a UTF-8 character: {:.2f}%\n", 100.0 * s.character_split_rate());
    fmt::print("numbers cut right to left in equal groups: {:.2f}% of {}\n", 100.0 * s.digit_alignment(), s.numbers);
    fmt::print("line breaks in whitespace-only tokens: {:.2f}% of {}\n", 100.0 * s.line_break_purity(),
               s.line_breaks);
  } else {
    fmt::print("character, number and line-break measures: n/a (the tokens' bytes do not reproduce the text: the "
               "tokenizer normalises it)\n");
  }
  fmt::print("encode speed: {:.1f} MB/s\n", s.bytes / 1e6 / std::max(encode_seconds, 1e-9));
  return 0;
}

}  // namespace

void add_tokenizer_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("tokenizer", "Train a byte-level BPE tokenizer, encode, decode, measure");
  cmd->require_subcommand(1);

  auto train = std::make_shared<TokenizerTrainOptions>();
  auto* train_cmd = cmd->add_subcommand("train", "Learn byte-level BPE merges; writes OUT/tokenizer.json");
  auto* inputs = train_cmd->add_option("--input", train->inputs, "Training text files")->check(CLI::ExistingFile);
  auto* preset = train_cmd->add_option("--preset", train->preset, "Train on a known corpus: fortunes (the demo's)")
                     ->check(CLI::IsMember({"fortunes"}));
  inputs->excludes(preset);
  train_cmd->add_option("--vocab", train->vocab, "Vocabulary size, special tokens included")->required();
  train_cmd->add_option("--out", train->out, "Output folder")->required();
  train_cmd->add_option("--special", train->specials, "Extra special tokens after bos/eos/pad/mask");
  train_cmd->callback([&action, train] { action = [train] { return run_train(*train); }; });

  auto spec = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto* encode_cmd = cmd->add_subcommand("encode", "Print the ids of --text, or of standard input");
  encode_cmd->add_option("--tokenizer", *spec, kSpecHelp)->required();
  auto* text_option = encode_cmd->add_option("--text", *text, "Text to encode (default: standard input)");
  encode_cmd->callback([&action, spec, text, text_option] {
    const bool given = text_option->count() > 0;
    action = [spec, text, given] { return run_encode(*spec, given ? text.get() : nullptr); };
  });

  auto ids = std::make_shared<std::vector<std::string>>();
  auto* decode_cmd = cmd->add_subcommand("decode", "Print the text of the ids (special tokens kept)");
  decode_cmd->add_option("--tokenizer", *spec, kSpecHelp)->required();
  decode_cmd->add_option("ids", *ids, "Token ids")->required();
  decode_cmd->callback([&action, spec, ids] { action = [spec, ids] { return run_decode(*spec, *ids); }; });

  auto files = std::make_shared<std::vector<std::string>>();
  auto* stats_cmd =
      cmd->add_subcommand("stats", "Compression, fertility, UTF-8 character splits, digit alignment, line breaks, unigram entropy");
  stats_cmd->add_option("--tokenizer", *spec, kSpecHelp)->required();
  stats_cmd->add_option("files", *files, "Text files")->required();
  stats_cmd->callback([&action, spec, files] { action = [spec, files] { return run_stats(*spec, *files); }; });
}

}  // namespace inkstone::cli
