// `inkstone data prepare`: text, JSONL or fortune files into a self-contained folder of token shards.
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/progress.h"
#include "dataset/data_prepare.h"
#include "dataset/tokenizer.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string tokenizer;
  std::string out;
  std::string format = "text";
  std::string field = "text";
  // A run's [chat] defaults, so that data prepared without these flags matches a run that sets no [chat].
  std::string chat_format = choice_name(default_config().chat.format);
  std::string system = default_config().chat.system;
  std::string prompt_start = choice_name(default_config().chat.prompt_start);
  std::string train_on = "responses";
  bool split_turns = false;
  std::string preset;
  double val_fraction = 0.05;
  std::string val_split = "documents";
  int64_t shard_tokens = int64_t{64} << 20;
};

void print_summary(const PrepareSummary& summary, const std::filesystem::path& out) {
  const Manifest& m = summary.manifest;
  fmt::print("wrote {}: tokenizer {} ({} ids, fingerprint {}), {} shards\n", out.string(), m.tokenizer_kind,
             m.vocab_size, m.tokenizer_fingerprint, dtype_name(m.dtype));
  int64_t tokens = 0;
  for (const auto& [name, split] : m.splits) {
    tokens += split.tokens;
    const double bytes_per_token = split.tokens > 0 ? static_cast<double>(split.text_bytes) / split.tokens : 0.0;
    fmt::print("  {:<5} {:>10} documents {:>12} tokens {:>3} shard(s) {:.3f} bytes/token\n", name, split.documents,
               split.tokens, split.shards.size(), bytes_per_token);
    if (m.loss_mask)
      fmt::print("        trained on {} of {} tokens ({:.1f}%): the loss mask\n", split.trained_tokens, split.tokens,
                 split.tokens > 0 ? 100.0 * static_cast<double>(split.trained_tokens) / split.tokens : 0.0);
  }
  if (m.chat && m.chat->multi_response_conversations > 0)
    fmt::print("{} conversations train on several responses: fine for AR; diffusion objectives need --split-turns\n",
               m.chat->multi_response_conversations);
  if (summary.unrepresented_bytes > 0)
    fmt::print("warning: {} bytes of the input have no token in this tokenizer (no unk token, no byte fallback) and "
               "are left out of the shards; a byte-level vocabulary whose tokenizer.json has no ByteLevel "
               "pre_tokenizer loses spaces and non-ASCII text this way\n",
               summary.unrepresented_bytes);
  const double seconds = std::max(summary.seconds, 1e-9);
  fmt::print("read {} in {:.2f} s: {}/s, {} tokens/s\n", human_bytes(summary.input_bytes), summary.seconds,
             human_bytes(summary.input_bytes / seconds), human_count(tokens / seconds));
}

int run_prepare(const PrepareArgs& args) {
  PrepareOptions options;
  if (args.preset == "fortunes") {
    options = fortunes_preset();
  } else {
    if (args.inputs.empty()) throw InputError("give --input PATH... or --preset fortunes");
    options.inputs.assign(args.inputs.begin(), args.inputs.end());
    options.format = input_format_from_name(args.format);
    options.jsonl_field = args.field;
    const PrepareArgs defaults;
    if (args.format != "chat" && (args.chat_format != defaults.chat_format || args.system != defaults.system ||
                                  args.prompt_start != defaults.prompt_start || args.train_on != defaults.train_on ||
                                  args.split_turns))
      throw InputError(fmt::format("--chat-format, --system, --prompt-start, --train-on and --split-turns render "
                                   "conversations: they need --format chat (not {})",
                                   args.format));
    options.chat = {*choice_named<ChatFormat>(args.chat_format), args.system,
                    *choice_named<PromptStart>(args.prompt_start), {}};
    options.train_on_all = args.train_on == "all";
    options.split_turns = args.split_turns;
  }
  options.out_dir = args.out;
  options.val_fraction = args.val_fraction;
  options.val_split = args.val_split == "tail" ? ValSplit::tail : ValSplit::documents;
  options.max_shard_tokens = args.shard_tokens;
  options.show_progress = true;
  const auto tokenizer = load_tokenizer(args.tokenizer);
  print_summary(prepare_data(options, *tokenizer), options.out_dir);
  return 0;
}

}  // namespace

void add_data_command(CLI::App& app, Action& action) {
  auto* data = app.add_subcommand("data", "Prepare token shards for training; synthesise task data");
  data->require_subcommand(1);
  auto* prepare = data->add_subcommand("prepare", "Tokenize text, JSONL or fortune files into DIR (manifest.json, "
                                                  "tokenizer.json, token shards)");
  auto args = std::make_shared<PrepareArgs>();
  auto* input = prepare->add_option("--input", args->inputs, "Text files, folders of them (recursive) or JSONL files");
  prepare->add_option("--tokenizer", args->tokenizer, "'byte', a tokenizer.json, or a folder holding one")->required();
  prepare->add_option("--out", args->out, "Output folder")->required();
  auto* format = prepare->add_option("--format", args->format, "text: a file is a document; jsonl: a line is; "
                                                               "fortune: '%'-separated entries are; chat: a JSONL "
                                                               "line is a conversation, trained on its responses")
                     ->check(CLI::IsMember({"text", "jsonl", "fortune", "chat"}))
                     ->capture_default_str();
  prepare->add_option("--chat-format", args->chat_format, "--format chat: how turns render (the run's chat.format)")
      ->check(CLI::IsMember({"raw", "chatml", "llama3"}))
      ->capture_default_str();
  prepare->add_option("--system", args->system, "--format chat: system message of conversations without one "
                                                "(the run's chat.system)");
  prepare->add_option("--prompt-start", args->prompt_start, "--format chat: token a conversation starts with "
                                                            "(the run's chat.prompt_start)")
      ->check(CLI::IsMember({"none", "bos", "eos"}))
      ->capture_default_str();
  prepare->add_option("--train-on", args->train_on, "--format chat: responses (a loss mask on everything else) or all")
      ->check(CLI::IsMember({"responses", "all"}))
      ->capture_default_str();
  prepare->add_flag("--split-turns", args->split_turns,
                    "--format chat: one conversation per assistant message, trained on it alone with the turns "
                    "before as context (what diffusion objectives need of multi-turn data)");
  prepare->add_option("--field", args->field, "JSONL field holding the text")->capture_default_str();
  prepare->add_option("--val-fraction", args->val_fraction, "Share of documents for validation (see data_prepare.h)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  prepare->add_option("--val-split", args->val_split,
                      "documents: whole documents by hash; tail: the last fraction of each text file")
      ->check(CLI::IsMember({"documents", "tail"}))
      ->capture_default_str();
  prepare->add_option("--shard-tokens", args->shard_tokens, "Tokens per shard before the next one starts")
      ->check(count_range(1, int64_t{1} << 40))
      ->capture_default_str();
  prepare->add_option("--preset", args->preset, "fortunes: the English files of the Debian fortunes package")
      ->check(CLI::IsMember({"fortunes"}))
      ->excludes(input)
      ->excludes(format);
  prepare->callback([&action, args] { action = [args] { return run_prepare(*args); }; });
  add_data_synth_command(*data, action);
}

}  // namespace inkstone::cli
