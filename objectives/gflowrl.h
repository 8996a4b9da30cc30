// GFlowRL (docs/rl.md, "GFlowRL"): trajectory balance toward π_ref·exp(β r) with a stop-gradient group log Z,
// asymmetric flow-gap clipping, a capped IS weight and degenerate-group filtering.
#pragma once
#include "objectives/objective.h"
#include "objectives/policy_likelihood.h"

namespace inkstone {

// The no-gradient half of the TB residual for each rollout of a batch (docs/rl.md, "One update", once per
// rollout batch).
struct FlowGaps {
  torch::Tensor log_z;         // [B] the group's log Ẑ (Eq. 4)
  torch::Tensor gap;           // [B] g_i (Eq. 6)
  torch::Tensor clipped;       // [B] g̃_i = clamp(g_i, −push_up, +push_down) (Eq. 7)
  torch::Tensor reward_part;   // [B] β(r̄ − r_i); gap − reward_part is the drift part
  torch::Tensor kept;          // [B] bool: the group is not degenerate (or filtering is off)
  torch::Tensor lengths;       // [B] |y_i| as float
  torch::Tensor old_seq;       // [B] ℓ^old_i
};
FlowGaps flow_gaps(const GflowrlConfig& config, const Batch& batch);

class GflowrlObjective : public Objective {
 public:
  GflowrlObjective(const Config& config, const Tokenizer& tokenizer);
  std::string name() const override { return "gflowrl"; }
  ObjectiveNeeds needs() const override;
  // Units are the kept rollouts, so the denominator is G_kept (docs/rl.md, "Degenerate groups").
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override;
  // The policy is an AR model: windows are scored by next-token loss.
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;
  std::map<std::string, double> rollout_metrics(const Batch& batch) const override;

 private:
  GflowrlConfig config_;
  std::unique_ptr<PolicyLikelihood> policy_;  // rl.policy read as rl.likelihood says
};

}  // namespace inkstone
