// The RL post-training loop for objectives that consume rollouts (GFlowRL, GRPO): per step, G rollouts for each
// of a batch of prompts, rewards, the trainer's own old (and reference) log-probs, then several epochs of
// mini-batch AdamW updates; the metrics of docs/rl.md, "Metrics" per step, held-out pass@k every
// train.eval_interval steps.
// Data parallel: each rank rolls out its own whole groups (P / ranks prompts of the step's P, the ones a single
// process would draw), every mini-batch takes the same number of groups from each rank, and the gradient is the
// global mean (core/distributed.h); held-out problems are split over the ranks too.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint.h"
#include "core/config.h"
#include "core/distributed.h"
#include "core/optimizer.h"
#include "core/tokenizer.h"
#include "models/language_model.h"
#include "objectives/objective.h"
#include "rl/policy_eval.h"
#include "rl/task.h"

namespace inkstone {

struct RlResult {
  int64_t steps_done = 0;
  int64_t skipped_updates = 0;
  std::map<std::string, double> final_eval;
  std::filesystem::path last_checkpoint;
  int stop_signal = 0;  // the run stopped early, checkpointed, on this signal (core/stop_signal.h)
};

// The problems rl.* describes: the training ones, or the held-out ones (rl.eval_path, rl.eval_seed).
TaskOptions task_options(const RlConfig& rl, bool held_out);

// How rl.* evaluates a policy: the first rl.eval_prompts held-out problems, rl.eval_samples samples each at
// rl.eval_temperature, always with the same sampling seed so that evaluations differ by the policy only.
PolicyEvalOptions policy_eval_options(const Config& config);

// rl.rewards entries "name" or "name=weight" as reward functions of rl.task; InputError for a malformed entry.
std::vector<WeightedReward> weighted_rewards(const RlConfig& rl);

class RlTrainer {
 public:
  // `policy` holds the initial weights (rl.init_checkpoint); with rl.reference = initial a frozen copy of them
  // is the reference.
  // `distributed`: this rank's process group; null for a single process.
  RlTrainer(Config config, LanguageModel policy, std::unique_ptr<Objective> objective,
            std::shared_ptr<const Tokenizer> tokenizer, std::filesystem::path run_dir, torch::Device device,
            std::shared_ptr<Distributed> distributed = nullptr);
  // Continues a run from one of its checkpoints: policy, objective weights, optimizer, step. Prompts and
  // rollout seeds are functions of (run.seed, step), so the continuation is the one the run would have taken.
  void resume(const CheckpointData& checkpoint);
  RlResult run();

  // Called after every step with its metrics line; tests use it.
  std::function<void(int64_t, const nlohmann::json&)> on_step;

 private:
  struct Update;
  nlohmann::json rollout_step(int64_t step);
  Update update(const Batch& rollouts, int64_t step);
  int64_t rank_prompts() const { return config_.rl.prompts_per_step / distributed_->world_size(); }
  std::map<std::string, double> evaluate();
  std::filesystem::path save(double elapsed_s);

  Config config_;
  LanguageModel policy_;
  LanguageModel reference_{nullptr};  // null when the reference is π_old
  std::unique_ptr<Objective> objective_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<PromptSource> train_problems_;
  std::unique_ptr<PromptSource> eval_problems_;
  std::vector<WeightedReward> rewards_;
  std::filesystem::path run_dir_;
  torch::Device device_;
  NamedTensors optimized_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::shared_ptr<Distributed> distributed_;
  std::unique_ptr<GradientSynchroniser> synchroniser_;  // only with several ranks
  int64_t step_ = 0;
  int64_t optimizer_steps_ = 0;
  int64_t skipped_updates_ = 0;
  int64_t bad_in_a_row_ = 0;
  torch::Tensor weights_finite_;  // after the latest optimizer step; read with the next transfer (all_finite)
  double elapsed_before_s_ = 0;
};

}  // namespace inkstone
