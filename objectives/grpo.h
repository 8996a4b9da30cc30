// GRPO / DAPO as in common trainers (docs/rl.md, "GRPO"): group-normalised advantages, a PPO surrogate with
// separate low and high ratio clips, an optional k3 KL to the reference, and the trainers' loss aggregation modes.
#pragma once
#include "objectives/ar.h"
#include "objectives/objective.h"

namespace inkstone {

// grpo.aggregation (docs/rl.md, "Loss aggregation").
enum class LossAggregation { token_mean, seq_mean_token_mean, seq_mean_token_sum, dr_grpo };

class GrpoObjective : public Objective {
 public:
  explicit GrpoObjective(const Config& config);
  std::string name() const override { return "grpo"; }
  ObjectiveNeeds needs() const override;
  // Units: policy tokens for token_mean, sequences otherwise (docs/rl.md, "Loss aggregation").
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override;
  // The policy is an AR model: windows are scored by next-token loss.
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;

 private:
  GrpoConfig config_;
  LossAggregation aggregation_;  // config_.aggregation, parsed once
  bool scale_by_group_std_;      // config_.scale_rewards = group
  double temperature_;
  int64_t logit_chunk_mib_;  // objective.logit_chunk_mib
  int64_t max_new_tokens_;  // Dr.GRPO's constant L_max
  AutoregressiveObjective next_token_;
};

}  // namespace inkstone
