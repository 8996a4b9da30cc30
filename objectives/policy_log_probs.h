// Per-token log-probabilities of a rollout batch's own tokens under a model: the ℓ terms of every RL objective
// (docs/rl.md, "Policy log-probs") and the trainer's old and reference log-probs come from this one function.
#pragma once
#include <torch/types.h>

#include "core/batch.h"
#include "models/language_model.h"
#include "objectives/objective.h"

namespace inkstone {

struct PolicyLogProbs {
  torch::Tensor log_probs;  // [B, W]: log softmax(logits / T) at tokens[t] given tokens[<t]; 0 off the policy mask
  torch::Tensor entropy;    // [B, W]: entropy of that distribution on the policy mask, 0 elsewhere; if asked
  torch::Tensor hidden;     // [B, W−1, d]: the head's input at positions 0..W−2; if asked
};

// Rows are right-padded, so the causal mask alone keeps padding out of every real position.
// Sequence log-probs ℓ_i are their sums over the row. The head runs in row chunks of logit_chunk_mib MiB of
// float32 logits (objectives/chunked_vocab.h): backward recomputes each chunk instead of keeping [B, W−1, V].
PolicyLogProbs policy_log_probs(LanguageModelImpl& model, const Batch& batch, double temperature,
                                int64_t logit_chunk_mib, bool with_entropy = false, bool with_hidden = false);

// What every RL objective asks for: rollouts of the policy, scored under the causal mask.
inline ObjectiveNeeds policy_rollout_needs() {
  ObjectiveNeeds needs;
  needs.consumes = BatchKind::rollouts;
  needs.mask = MaskMode::causal;
  return needs;
}

}  // namespace inkstone
