// `inkstone eval --checkpoint PATH | --run-dir DIR [--data DIR] [--split val] [--format text|json]`
// `inkstone eval --checkpoint PATH --token-ids FILE --dump-logits OUT`: the logits of given ids, to hold a
// checkpoint against another implementation (transformers) position by position.
// `inkstone eval --run-dir DIR --task arithmetic [--difficulty 2] [--problems 64] [--samples 8] ...`: held-out
// pass@k of a policy on a task, with the run's rl.* settings as defaults.
#include <fmt/format.h>

#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "rl/rl_options.h"
#include "tools/commands.h"
#include "tools/run_setup.h"
#include "train/window_source.h"

namespace inkstone::cli {
namespace {

struct EvalOptions {
  std::string checkpoint;
  std::string data;
  std::string split = "val";
  std::string format = "text";
  std::string device;
  int64_t batch_size = 0;
  // Task evaluation; unset values keep the checkpoint's rl.* settings.
  std::string task;
  std::string task_path;
  std::optional<int64_t> difficulty, problems, samples, max_new_tokens;
  std::optional<double> temperature;
  std::string token_ids;
  std::string dump_logits;
};

// One sequence per line, ids separated by spaces or commas; or a JSON array of arrays. Rows must be equally long.
torch::Tensor read_token_ids(const std::string& path, int64_t vocab_size) {
  std::vector<std::vector<int64_t>> rows;
  const std::string content = read_input_file(path, "token ids file");
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && content[first] == '[') {
    try {
      rows = nlohmann::json::parse(content).get<std::vector<std::vector<int64_t>>>();
    } catch (const nlohmann::json::exception&) {
      throw InputError(fmt::format("{}: not a JSON array of arrays of ids", path));
    }
  } else {
    std::istringstream lines(content);
    for (std::string line; std::getline(lines, line);) {
      for (char& c : line)
        if (c == ',') c = ' ';
      std::istringstream ids(line);
      std::vector<int64_t> row;
      std::string word;
      while (ids >> word) {
        try {
          size_t used = 0;
          row.push_back(std::stoll(word, &used));
          if (used != word.size()) throw std::invalid_argument(word);
        } catch (const std::exception&) {
          throw InputError(fmt::format("{}: '{}' is not a token id", path, word));
        }
      }
      if (!row.empty()) rows.push_back(std::move(row));
    }
  }
  if (rows.empty()) throw InputError(fmt::format("{}: holds no token ids", path));
  for (const auto& row : rows) {
    if (row.size() != rows[0].size())
      throw InputError(fmt::format("{}: rows of {} and {} ids; every row must be as long", path, rows[0].size(),
                                   row.size()));
    for (int64_t id : row)
      if (id < 0 || id >= vocab_size)
        throw InputError(fmt::format("{}: id {} is outside the vocabulary of {}", path, id, vocab_size));
  }
  auto tokens = torch::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, torch::kLong);
  for (size_t r = 0; r < rows.size(); ++r)
    std::copy(rows[r].begin(), rows[r].end(), tokens[static_cast<int64_t>(r)].data_ptr<int64_t>());
  return tokens;
}

int dump_logits(const EvalOptions& o) {
  TrainedModel trained = load_trained_model(o.checkpoint, o.device);
  if (trained.config.model.time_conditioning)
    throw InputError("--dump-logits needs a model without time conditioning (it takes no noise level)");
  const auto tokens = read_token_ids(o.token_ids, trained.model->vocab_size());
  WindowInputs window;
  window.mask = trained.objective->needs().mask;
  torch::NoGradGuard no_grad;
  const auto logits = trained.model->forward(tokens.to(trained.device), window).to(torch::kCPU);
  write_safetensors(o.dump_logits, {{"input_ids", tokens}, {"logits", logits}});
  fmt::print("wrote {}: logits [{}, {}, {}] (fp32) of {} at step {}, {} attention\n", o.dump_logits, logits.size(0),
             logits.size(1), logits.size(2), o.checkpoint, trained.step,
             window.mask == MaskMode::causal ? "causal" : "bidirectional");
  return 0;
}

void print_metrics(const EvalOptions& o, const TrainedModel& trained, const std::string& what,
                   const std::map<std::string, double>& metrics) {
  if (o.format == "json") {
    nlohmann::json out = {{"checkpoint", o.checkpoint}, {"step", trained.step}, {"split", what},
                          {"objective", trained.objective->name()}};
    for (const auto& [name, value] : metrics) out[name] = value;
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{} at step {}, {} ({}):\n", o.checkpoint, trained.step, what, trained.objective->name());
    for (const auto& [name, value] : metrics) fmt::print("  {:<28} {:.6f}\n", name, value);
  }
}

int eval_task(const EvalOptions& o) {
  TrainedModel trained = load_trained_model(o.checkpoint, o.device);
  Config config = trained.config;
  RlConfig& rl = config.rl;
  rl.task = o.task;
  if (!o.task_path.empty()) rl.eval_path = o.task_path;
  if (o.difficulty) rl.difficulty = *o.difficulty;
  if (o.problems) rl.eval_prompts = *o.problems;
  if (o.samples) rl.eval_samples = *o.samples;
  if (o.max_new_tokens) rl.max_new_tokens = *o.max_new_tokens;
  if (o.temperature) rl.eval_temperature = *o.temperature;
  const auto problems = make_prompt_source(task_options(rl, /*held_out=*/true));
  const auto metrics = evaluate_policy(policy_rollouts(trained.model, config, *trained.tokenizer), *trained.tokenizer,
                                       *problems, weighted_rewards(rl), policy_eval_options(config));
  print_metrics(o, trained, fmt::format("task {} held-out", rl.task), metrics);
  return 0;
}

int eval(const EvalOptions& o) {
  TrainedModel trained = load_trained_model(o.checkpoint, o.device);
  Config& config = trained.config;
  if (!o.data.empty()) config.data.path = o.data;
  if (config.data.path.empty() && !config.data.mixture.empty())
    throw InputError("this run trained on data.mixture: pass --data FOLDER to evaluate one of its folders");
  WindowLoaderOptions loader_options;
  loader_options.split = o.split;
  loader_options.window_len = config.data.seq_len + trained.objective->needs().window_extra;
  loader_options.mode = config.data.mode;
  loader_options.expect_tokenizer(*trained.tokenizer);  // as train does: fingerprint, vocabulary size and kind
  WindowLoader loader(config.data.path, loader_options);
  const int64_t batch = o.batch_size > 0 ? o.batch_size : config.train.batch_size / config.train.grad_accum;
  WindowEvalSource source(loader, batch, /*max_batches=*/0, trained.device,
                          document_split(config.data, *trained.tokenizer, trained.objective->needs()));
  auto metrics = validation_metrics(trained.objective->evaluate(*trained.model, source), source.bytes_per_token());

  print_metrics(o, trained, "split " + o.split, metrics);
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand("eval", "Validation metrics of a checkpoint");
  auto* checkpoint = cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder");
  auto* run_dir = cmd->add_option("--run-dir", o->checkpoint, "Run folder (its newest checkpoint)");
  checkpoint->excludes(run_dir);
  cmd->add_option("--data", o->data, "Data folder (default: the training config's data.path)");
  cmd->add_option("--split", o->split, "Split to evaluate")->check(CLI::IsMember({"train", "val"}));
  cmd->add_option("--format", o->format, "text | json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--device", o->device, "auto | cpu | cuda (default: the run's)");
  cmd->add_option("--batch-size", o->batch_size, "Windows per batch (default: the training micro-batch)");
  auto* task = cmd->add_option("--task", o->task, "Held-out pass@k on a task (arithmetic, countdown, gsm8k, math)");
  cmd->add_option("--task-path", o->task_path, "gsm8k, math: the held-out problems file")->needs(task);
  cmd->add_option("--difficulty", o->difficulty, "Procedural tasks: difficulty")->needs(task)->check(CLI::Range(1, 100));
  cmd->add_option("--problems", o->problems, "Held-out problems")->needs(task)->check(count_range(1, 10000000));
  cmd->add_option("--samples", o->samples, "Samples per problem (k)")->needs(task)->check(CLI::Range(1, 4096));
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Longest completion")->needs(task)->check(count_range(1, 1 << 24));
  cmd->add_option("--temperature", o->temperature, "Sampling temperature")->needs(task)->check(CLI::Range(1e-3, 100.0));
  auto* ids = cmd->add_option("--token-ids", o->token_ids,
                              "With --dump-logits: ids to score, one sequence per line (or a JSON array of arrays)");
  auto* dump = cmd->add_option("--dump-logits", o->dump_logits,
                               "Write the logits of --token-ids to this safetensors file (input_ids, logits)");
  ids->needs(dump);
  dump->needs(ids);
  dump->excludes(task);
  cmd->callback([o, &action] {
    action = [o] {
      if (o->checkpoint.empty()) throw InputError("eval needs --checkpoint PATH or --run-dir DIR");
      if (!o->dump_logits.empty()) return dump_logits(*o);
      return o->task.empty() ? eval(*o) : eval_task(*o);
    };
  });
}

}  // namespace inkstone::cli
