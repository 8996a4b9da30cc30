// Steps from rollouts of the policy being trained (decoded or denoised, rl/policy_rollouts.h), for objectives that consume them (GFlowRL, GRPO, FlowRL): per
// step, G rollouts for each of a batch of prompts, rewards, the trainer's own old (and reference) log-probs, then
// rl.epochs x rl.mini_batches optimizer updates; the metrics of docs/rl.md, "Metrics" per step, held-out pass@k
// as the evaluation.
// Data parallel: each rank rolls out its own whole groups (P / ranks prompts of the step's P, the ones a single
// process would draw), every mini-batch takes the same number of groups from each rank, and the gradient is the
// global mean (train/distributed.h); held-out problems are split over the ranks too.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dataset/prompt_source.h"
#include "objectives/policy_likelihood.h"
#include "rl/policy_rollouts.h"
#include "rl/rl_options.h"
#include "train/session.h"

namespace inkstone {

struct Rollouts;  // sampler/rollout.h

class RolloutSource : public StepSource {
 public:
  // The session's model is the initial policy (rl.init_checkpoint); with rl.reference = initial a frozen copy of
  // it is the reference. InputError for an objective that trains on token windows or prompt counts that do not
  // split evenly over the ranks.
  explicit RolloutSource(TrainingSession& session);

  std::string name() const override { return "rl"; }
  StepReport step(TrainingSession& session, int64_t step) override;
  EvalReport evaluate(TrainingSession& session) override;
  bool evaluates_before_training() const override { return true; }
  nlohmann::json checkpoint_state() const override;
  void restore(const CheckpointData& checkpoint) override;

  // Called after every step with its metrics line; tests use it.
  std::function<void(int64_t, const nlohmann::json&)> on_step;

 private:
  struct Updates;
  struct Generated;
  struct Scored {
    std::vector<double> rewards;  // per completion
    double correct = 0, unparsed = 0;
  };
  // The stages of a step.
  Generated generate(TrainingSession& session, int64_t step) const;
  Scored score(const Generated& generated) const;
  nlohmann::json annotate_log_probs(TrainingSession& session, Batch& batch);
  void add_rollout_statistics(nlohmann::json& line, const Scored& scored, const Rollouts& rollouts) const;
  Updates update(TrainingSession& session, const Batch& rollouts, int64_t step);
  int64_t rank_prompts() const { return rl_.prompts_per_step / world_size_; }

  RlConfig rl_;
  PolicyEvalOptions eval_options_;
  ChatConfig chat_;
  uint64_t seed_;
  int64_t steps_;
  bool cuda_graphs_;
  int64_t rank_;
  int64_t world_size_;
  LanguageModel reference_{nullptr};  // null when the reference is π_old or the LoRA policy's base
  bool reference_is_base_ = false;     // the reference is the policy with its LoRA adapters off
  std::unique_ptr<PromptSource> train_problems_;
  std::unique_ptr<PromptSource> eval_problems_;
  std::vector<WeightedReward> rewards_;
  PolicyRollouts rollouts_;                       // how the policy generates (rl.policy)
  std::unique_ptr<PolicyLikelihood> likelihood_;  // π_old's and the reference's log-probs, as the objective reads π_θ's
  int64_t optimizer_steps_ = 0;
};

}  // namespace inkstone
