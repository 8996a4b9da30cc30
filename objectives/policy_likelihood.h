// How an RL objective reads the policy it trains (docs/rl.md, "Policy log-probs" and "Diffusion policies"): per
// position terms of a rollout batch whose row sums are the completions' sequence log-likelihoods ℓ_i, exact for a
// policy that decodes left to right and an estimate for one that denoises, and the policy's own evaluation on
// token windows. GFlowRL, GRPO and FlowRL see only these tensors, so they train either kind unchanged; the trainer's
// old and reference log-probs come from the same estimate with the same draws, so ratios are coupled.
#pragma once
#include <memory>

#include <torch/types.h>

#include "config/config.h"
#include "core/batch.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "objectives/objective.h"

namespace inkstone {

struct PolicyLogProbs {
  torch::Tensor log_probs;  // [B, W]: per-position terms of ℓ_i at the policy's positions, 0 off the policy mask
  torch::Tensor entropy;    // [B, W]: entropy of the per-position distribution on the policy mask; if asked
  torch::Tensor hidden;     // [B, P, d]: the head's input, P ≤ W positions from the first; if asked
};

class PolicyLikelihood {
 public:
  virtual ~PolicyLikelihood() = default;
  // The attention and time input the policy's forward takes; consumes = rollouts.
  virtual ObjectiveNeeds needs() const = 0;
  // Differentiable in the model's parameters. Draws it makes are keyed by batch.rollout.noise_keys, so the same
  // rows give the same draws under any model and in any mini-batch.
  virtual PolicyLogProbs log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy = false,
                                   bool with_hidden = false) const = 0;
  // The policy's pretraining objective on token windows (next-token loss, or the diffusion NELBO bound).
  virtual ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) = 0;
  // How many rows of forward one rollout row costs when scored (the memory plan's activations scale with it).
  virtual int64_t forward_rows_per_rollout() const { return 1; }
};

// The likelihood of the policy named by config.rl.policy (objectives/registry.cpp): `ar` or empty for a causal
// policy, a diffusion objective's name for a denoising one, read as config.rl.likelihood says.
std::unique_ptr<PolicyLikelihood> make_policy_likelihood(const Config& config, const Tokenizer& tokenizer);

}  // namespace inkstone
