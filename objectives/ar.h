// Autoregressive objective: next-token cross-entropy under the causal mask, padding ignored; optionally the logits'
// z-loss (objectives/z_loss.h) on the same targets.
#pragma once
#include "objectives/objective.h"

namespace inkstone {

class AutoregressiveObjective : public Objective {
 public:
  explicit AutoregressiveObjective(const Config& config);
  std::string name() const override { return "ar"; }
  ObjectiveNeeds needs() const override;
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override;
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;

 private:
  double z_loss_;           // objective.z_loss
  int64_t logit_chunk_mib_;  // objective.logit_chunk_mib
};

}  // namespace inkstone
