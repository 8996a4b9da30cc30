// GRPO / DAPO as in common trainers (docs/rl.md, "GRPO"): group-normalised advantages, a PPO surrogate with
// separate low and high ratio clips, an optional k3 KL to the reference, and the trainers' loss aggregation modes.
#pragma once
#include "objectives/objective.h"
#include "objectives/policy_likelihood.h"

namespace inkstone {

class GrpoObjective : public Objective {
 public:
  GrpoObjective(const Config& config, const Tokenizer& tokenizer);
  std::string name() const override { return "grpo"; }
  ObjectiveNeeds needs() const override;
  // Units: policy tokens for token_mean, sequences otherwise (docs/rl.md, "Loss aggregation").
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override;
  // The policy is an AR model: windows are scored by next-token loss.
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;

 private:
  GrpoConfig config_;
  int64_t max_new_tokens_;  // Dr.GRPO's constant L_max
  std::unique_ptr<PolicyLikelihood> policy_;  // rl.policy read as rl.likelihood says
};

}  // namespace inkstone
