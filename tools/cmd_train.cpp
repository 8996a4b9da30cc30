// `inkstone train CONFIG.toml [--set section.key=value ...] [--run-dir DIR] [--resume] [--print-defaults]
//  [--print-reference] [--dry-run [--ranks N]]`
#include <cstring>

#include <fmt/format.h>

#include "checkpoint/checkpoint.h"
#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/platform.h"
#include "core/run_lock.h"
#include "objectives/policy_likelihood.h"
#include "dataset/prompt_format.h"
#include "rl/rl_options.h"
#include "rl/task.h"
#include "rl/rollout_source.h"
#include "sampler/decode_step.h"
#include "sampler/text_samples.h"
#include "tools/commands.h"
#include "tools/config_reference.h"
#include "tools/init_checkpoint.h"
#include "tools/run_setup.h"
#include "train/distributed.h"
#include "train/memory_plan.h"
#include "train/session.h"
#include "train/stop_signal.h"
#include "train/window_source.h"

namespace inkstone::cli {
namespace {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string run_dir;
  bool resume = false;
  bool print_defaults = false;
  bool print_reference = false;
  bool dry_run = false;
  int64_t ranks = 0;  // for --dry-run; 0: the launch's, or 1
};

// Per-rank memory of the run `config` describes, predicted without building it (train/memory_plan.h); with
// train.init_checkpoint, of the architecture it adopts (`given`: the keys the config and --set give).
// Training prompts read to size an RL run's rows: enough to meet the long ones, few enough to read at once.
constexpr int64_t kPlannedPrompts = 1024;

// An RL run's plan: the policy rl.init_checkpoint names, its rollouts and the mini-batches of its updates.
int dry_run_rollouts(Config config, int64_t ranks, bool bf16) {
  const InitialCheckpoint initial = adopt_initial_policy(config);
  if (config.rl.prompts_per_step % (ranks * config.rl.mini_batches) != 0)
    throw InputError(fmt::format("rl.prompts_per_step = {} does not split over {} rank(s) x rl.mini_batches = {}",
                                 config.rl.prompts_per_step, ranks, config.rl.mini_batches));
  const auto likelihood = make_policy_likelihood(config, *initial.tokenizer);
  RolloutPolicyShape policy;
  policy.causal = likelihood->needs().mask == MaskMode::causal;
  // Graphs are captured where the run goes to CUDA (run.device = auto may find a GPU there) and the model allows.
  policy.graphed = policy.causal && config.sample.cuda_graphs && config.run.device != DeviceChoice::cpu &&
                   graph_decode_obstacle(config.model).empty();
  policy.forward_rows_per_rollout = likelihood->forward_rows_per_rollout();
  // Rows are prompt and completion: the longest of the first training prompts, as the run formats them.
  const auto problems = make_prompt_source(task_options(config.rl, false));
  const PromptFormat format(config.chat, *initial.tokenizer);
  int64_t longest = 0;
  for (int64_t i = 0; i < std::min<int64_t>(problems->size(), kPlannedPrompts); ++i)
    longest = std::max(longest, static_cast<int64_t>(format.encode(problems->get(i).text).size()));
  policy.row_tokens = std::min(config.model.max_seq_len, longest + config.rl.max_new_tokens);
  fmt::print("{}", describe(plan_rollout_memory(config, initial.tokenizer->vocab_size(), ranks, bf16, policy)));
  return 0;
}

int dry_run(Config config, int64_t ranks, const std::set<std::string>& given) {
  // Planned for where the run will go, which need not be this machine (a CUDA run's plan on a machine without a
  // GPU): bf16 autocast applies on CUDA, which run.device = auto picks where present.
  const bool bf16 = config.run.precision == FloatFormat::bf16 && config.run.device != DeviceChoice::cpu;
  if (objective_batch_kind(config.objective.name) == BatchKind::rollouts) return dry_run_rollouts(config, ranks, bf16);
  const int64_t split = ranks * config.train.grad_accum;
  if (config.train.batch_size % split != 0)
    throw InputError(fmt::format("train.batch_size = {} does not split over {} rank(s) x train.grad_accum = {}",
                                 config.train.batch_size, ranks, config.train.grad_accum));
  const auto tokenizer = load_run_tokenizer(config);
  if (!config.train.init_checkpoint.empty()) adopt_initial_checkpoint(config, given, *tokenizer);
  fmt::print("{}", describe(plan_memory(config, tokenizer->vocab_size(), ranks, bf16)));
  return 0;
}

// A data-parallel rank's process group (its own GPU first), or a single process's.
std::shared_ptr<Distributed> join_launch(const LaunchEnv& launch, const Config& config, torch::Device& device) {
  if (!launch.distributed()) return std::make_shared<Distributed>();
  device = device_of_rank(device, launch);
  return std::make_shared<Distributed>(launch, device, timeout_of(config.distributed));
}

// A run stopped by a signal (train/stop_signal.h) has checkpointed; it exits with the shell's code for that signal.
int report_stop(bool main, int signal, int64_t steps_done, const std::filesystem::path& checkpoint) {
  if (main)
    fmt::print("stopped by signal {} ({}) after step {}, checkpoint {}; continue with --resume\n", signal,
               ::strsignal(signal), steps_done, checkpoint.string());
  return 128 + signal;
}

// metrics.sample_prompts (or the [sample] prompt) sampled from the session's model; a prompt that leaves no room
// for sample.max_new_tokens in the context is refused here rather than at the first sampling step.
SampleTexts training_samples(TrainingSession& session) {
  const Config& config = session.config();
  std::vector<std::string> prompts = config.metrics.sample_prompts;
  if (prompts.empty()) prompts.push_back(config.sample.prompt);
  for (const auto& prompt : prompts) {
    const auto length = static_cast<int64_t>(session.tokenizer().encode(prompt).size());
    if (length + config.sample.max_new_tokens + 1 > config.model.max_seq_len)
      throw InputError(fmt::format("metrics.sample_prompts: '{}' ({} tokens) and sample.max_new_tokens = {} exceed "
                                   "model.max_seq_len = {}",
                                   prompt, length, config.sample.max_new_tokens, config.model.max_seq_len));
  }
  // An RL run samples its policy as the policy was trained (rl.policy): decoded or denoised.
  std::shared_ptr<const Objective> policy = make_policy_objective(config, session.tokenizer());
  return [&session, prompts, policy] {
    return sample_texts(session.model(), *policy, session.config(), session.tokenizer(), prompts, session.device());
  };
}

int train(const TrainOptions& o) {
  if (o.print_defaults) {
    fmt::print("{}", config_to_toml(default_config(), /*with_docs=*/true));
    return 0;
  }
  if (o.print_reference) {
    fmt::print("{}", config_reference_markdown());
    return 0;
  }
  if (o.config_path.empty()) throw InputError("train needs a CONFIG.toml (or --print-defaults)");
  Config config = load_config(o.config_path, o.overrides);
  check_objective_settings(config);
  check_rl_settings(config.rl);             // whatever the objective: `eval --task` reads [rl] later
  diffusion_sample_options(config.sample);  // refuses a [sample] sampler name before the run starts
  const LaunchEnv launch = launch_env_from_environment();
  if (o.dry_run)
    return dry_run(config, o.ranks > 0 ? o.ranks : launch.world_size, given_keys(o.config_path, o.overrides));
  const std::filesystem::path run_dir = resolve_run_dir(config, o.run_dir);
  // Rank 0 alone writes the run folder, so it alone holds the folder's lock.
  std::optional<RunLock> lock;
  if (launch.rank == 0) lock.emplace(run_dir);
  install_stop_signal_handlers();

  std::optional<CheckpointData> checkpoint;
  if (o.resume) {
    if (!latest_checkpoint(run_dir))
      throw InputError(fmt::format("--resume: run folder '{}' has no complete checkpoint yet; start the run without "
                                   "--resume",
                                   run_dir.string()));
    checkpoint = load_checkpoint(run_dir);
  } else if (std::filesystem::exists(run_dir / "checkpoints") && !std::filesystem::is_empty(run_dir / "checkpoints")) {
    throw InputError(fmt::format("run folder '{}' already has checkpoints: pass --resume to continue it, or "
                                 "choose another --run-dir",
                                 run_dir.string()));
  }

  // The run's config is final once the initial checkpoint is adopted: an RL policy's architecture and tokenizer, or
  // the architecture a run on token windows takes from train.init_checkpoint.
  const bool rollouts = objective_batch_kind(config.objective.name) == BatchKind::rollouts;
  if (rollouts && !config.train.init_checkpoint.empty())
    throw InputError(fmt::format("train.init_checkpoint applies to objectives that train on token windows; "
                                 "objective '{}' starts from rl.init_checkpoint (also its reference policy)",
                                 config.objective.name));
  std::optional<InitialCheckpoint> initial;
  if (rollouts) initial = adopt_initial_policy(config);
  RunContext ctx = prepare_run(config, initial ? initial->tokenizer : nullptr);
  if (!rollouts && !config.train.init_checkpoint.empty())
    initial = adopt_initial_checkpoint(config, given_keys(o.config_path, o.overrides), *ctx.tokenizer);
  // Adapters on random frozen weights would learn nothing worth having.
  if (config.model.lora_rank > 0 && !initial)
    throw InputError(fmt::format("model.lora_rank = {} adapts a trained model: set train.init_checkpoint to it",
                                 config.model.lora_rank));
  // A data-parallel rank: its own GPU, its share of each batch; rank 0 alone prints and writes the run folder.
  auto distributed = join_launch(launch, config, ctx.device);
  const bool main = distributed->is_main();
  LanguageModel model = build_model_for(config, *ctx.tokenizer, ctx.device);
  // The initial weights: always for an RL policy (they are its reference policy too, on --resume as well), and for
  // a run on windows until it has checkpoints of its own.
  if (initial && (rollouts || !checkpoint)) {
    const auto fresh = load_initial_weights(*model, *initial);
    initial->notes.insert(initial->notes.end(), fresh.begin(), fresh.end());
  }
  auto objective = make_objective(config, *ctx.tokenizer);  // sized for the final architecture (FlowRL's log Z head)
  if (main) {
    print_run_header(config, model, run_dir, ctx.device);
    if (initial && !checkpoint) {
      fmt::print("starting from {} (step {}, objective {}): weights only, a fresh optimizer and schedule\n",
                 initial->checkpoint.folder.string(), initial->checkpoint.step, initial->config.objective.name);
      for (const auto& note : initial->notes) fmt::print("  {}\n", note);
    }
    if (launch.distributed()) fmt::print("data parallel: {} ranks\n", launch.world_size);
    std::filesystem::create_directories(run_dir);
    write_file_atomic(run_dir / "config.toml", config_to_toml(config));
    ctx.tokenizer->save(run_dir / "tokenizer.json");
  }

  TrainingSession session(config, model, std::move(objective), ctx.tokenizer, run_dir, ctx.device, distributed);
  std::unique_ptr<StepSource> source;
  if (rollouts) {
    source = std::make_unique<RolloutSource>(session);
  } else {
    TrainingData data = open_training_data(config, *ctx.tokenizer, session.objective().needs(), launch.rank);
    source = std::make_unique<WindowSource>(session, data.train, std::move(data.sources));
  }
  if (config.metrics.sample_interval > 0) session.set_sample_texts(training_samples(session));
  if (checkpoint) {
    session.resume(*checkpoint, *source);
    if (checkpoint->step >= config.train.steps)
      throw InputError(fmt::format("the run in '{}' is already at step {} of train.steps = {}: raise train.steps "
                                   "(--set train.steps=N) to continue it",
                                   run_dir.string(), checkpoint->step, config.train.steps));
    if (main) fmt::print("resumed from step {}\n", checkpoint->step);
  }
  const TrainResult result = session.run(*source);
  if (result.stop_signal) return report_stop(main, result.stop_signal, result.steps_done, result.last_checkpoint);
  if (!main) return 0;
  fmt::print("done: {} steps ({} updates skipped), checkpoint {}\n", result.steps_done, result.skipped_updates,
             result.last_checkpoint.string());
  const std::string split = rollouts ? "eval" : "val";
  for (const auto& [name, value] : result.final_eval) fmt::print("  {} {} = {:.4f}\n", split, name, value);
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a model from a TOML config");
  cmd->add_option("config", options->config_path, "Config file (TOML)");
  cmd->add_option("--set", options->overrides, "Override a key: section.key=value (repeatable)");
  cmd->add_option("--run-dir", options->run_dir, "Run folder (default: run.run_dir or runs/<run.name>)");
  cmd->add_flag("--resume", options->resume, "Continue from the newest checkpoint in the run folder");
  cmd->add_flag("--print-defaults", options->print_defaults, "Print every key with its default and exit");
  cmd->add_flag("--print-reference", options->print_reference,
                "Print the configuration reference (docs/config.md) as Markdown and exit");
  auto* dry = cmd->add_flag("--dry-run", options->dry_run, "Print the predicted memory per rank and exit (builds nothing)");
  cmd->add_option("--ranks", options->ranks, "Data-parallel ranks for --dry-run (default: the launch's, or 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->needs(dry);
  cmd->callback([options, &action] { action = [options] { return train(*options); }; });
}

}  // namespace inkstone::cli
