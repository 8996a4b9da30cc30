// `inkstone eval --checkpoint PATH | --run-dir DIR [--data DIR] [--split val] [--format text|json]`
#include <fmt/format.h>

#include "core/errors.h"
#include "core/trainer.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace inkstone::cli {
namespace {

struct EvalOptions {
  std::string checkpoint;
  std::string data;
  std::string split = "val";
  std::string format = "text";
  std::string device;
  int64_t batch_size = 0;
};

int eval(const EvalOptions& o) {
  TrainedModel trained = load_trained_model(o.checkpoint, o.device);
  Config& config = trained.config;
  if (!o.data.empty()) config.data.path = o.data;
  WindowLoaderOptions loader_options;
  loader_options.split = o.split;
  loader_options.window_len = config.data.seq_len + trained.objective->needs().window_extra;
  loader_options.mode = window_mode_from_name(config.data.mode);
  loader_options.expected_tokenizer_fingerprint = trained.tokenizer->fingerprint();
  WindowLoader loader(config.data.path, loader_options);
  const int64_t batch = o.batch_size > 0 ? o.batch_size : config.train.batch_size / config.train.grad_accum;
  WindowEvalSource source(loader, batch, /*max_batches=*/0, trained.device);
  auto metrics = trained.objective->evaluate(*trained.model, source);

  if (o.format == "json") {
    nlohmann::json out = {{"checkpoint", o.checkpoint}, {"step", trained.step}, {"split", o.split},
                          {"objective", trained.objective->name()}};
    for (const auto& [name, value] : metrics) out[name] = value;
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{} at step {}, split {} ({}):\n", o.checkpoint, trained.step, o.split, trained.objective->name());
    for (const auto& [name, value] : metrics) fmt::print("  {:<14} {:.6f}\n", name, value);
  }
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
  cmd->callback([o, &action] {
    action = [o] {
      if (o->checkpoint.empty()) throw InputError("eval needs --checkpoint PATH or --run-dir DIR");
      return eval(*o);
    };
  });
}

}  // namespace inkstone::cli
