// FlowRL (docs/rl.md, "FlowRL"; Zhu et al. 2025): trajectory balance on length-normalised log-probs toward
// z-scored rewards, with a learned log Z on the prompt and a one-sided capped IS weight; the baseline GFlowRL
// improves on.
#pragma once
#include <torch/nn/modules/container/sequential.h>

#include "objectives/objective.h"
#include "objectives/policy_likelihood.h"

namespace inkstone {

// log Z_φ(x) from the masked mean of the last hidden state over the prompt tokens: 2 × [Linear(h, h), GELU,
// LayerNorm, Dropout] then Linear(h, 1), as FlowRL's ProjZModule. Gradients flow into the backbone too.
class LogZHeadImpl : public torch::nn::Module {
 public:
  LogZHeadImpl(int64_t width, double dropout);
  torch::Tensor forward(const torch::Tensor& pooled);  // [B, h] -> [B]

 private:
  torch::nn::Sequential layers_{nullptr};
};
TORCH_MODULE(LogZHead);

class FlowrlObjective : public Objective {
 public:
  FlowrlObjective(const Config& config, const Tokenizer& tokenizer);
  std::string name() const override { return "flowrl"; }
  ObjectiveNeeds needs() const override;
  // Units are rollouts: L = mean_i w_i δ_i².
  LossOutput loss(LanguageModelImpl& model, const Batch& batch) override;
  // The policy is an AR model: windows are scored by next-token loss.
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;
  std::shared_ptr<torch::nn::Module> trainable() override { return head_.ptr(); }

  // [B]: log Z_φ of each row's prompt, from the hidden states [B, W−1, d] of policy_log_probs.
  torch::Tensor log_z(const torch::Tensor& hidden, const Batch& batch);

 private:
  FlowrlConfig config_;
  LogZHead head_;
  std::unique_ptr<PolicyLikelihood> policy_;  // rl.policy read as rl.likelihood says
};

}  // namespace inkstone
