// Per-token log-probabilities of a rollout batch's own tokens under a policy that decodes left to right: the ℓ
// terms of every RL objective on such a policy (docs/rl.md, "Policy log-probs").
#pragma once
#include <torch/types.h>

#include "core/batch.h"
#include "models/language_model.h"
#include "objectives/ar.h"
#include "objectives/policy_likelihood.h"

namespace inkstone {

// log_probs[t] = log softmax(logits / T) at tokens[t] given tokens[<t]; hidden is [B, W−1, d] at positions
// 0..W−2. Rows are right-padded, so the causal mask alone keeps padding out of every real position.
// The head runs in row chunks of logit_chunk_mib MiB of float32 logits (objectives/chunked_vocab.h): backward
// recomputes each chunk instead of keeping [B, W−1, V].
PolicyLogProbs policy_log_probs(LanguageModelImpl& model, const Batch& batch, double temperature,
                                int64_t logit_chunk_mib, bool with_entropy = false, bool with_hidden = false);

// A causal policy: its exact token log-probs, and next-token loss on windows.
class CausalPolicy : public PolicyLikelihood {
 public:
  explicit CausalPolicy(const Config& config);
  ObjectiveNeeds needs() const override;
  PolicyLogProbs log_probs(LanguageModelImpl& model, const Batch& batch, bool with_entropy,
                           bool with_hidden) const override;
  ValidationSums evaluate(LanguageModelImpl& model, const EvalSource& source) override;

 private:
  double temperature_;       // rl.temperature
  int64_t logit_chunk_mib_;  // objective.logit_chunk_mib
  AutoregressiveObjective next_token_;
};

}  // namespace inkstone
