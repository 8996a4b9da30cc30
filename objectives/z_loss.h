// The auxiliary z-loss of PaLM (Chowdhery et al. 2022, "Training instability"): with Z = Σ_v exp(logit_v), the
// term log²Z per token pulls the softmax normaliser towards 1, so that the logits cannot drift as a whole, which
// bf16 logits and long runs otherwise allow. Weighted by objective.z_loss (Sumi: 1e-5) and added to the loss of
// the same units the objective averages over; docs/training.md, "z-loss".
#pragma once
#include <torch/types.h>


namespace inkstone {

// (log Σ_v exp logits_v)² over the last dimension, in the logits' dtype (float32 or wider): [..., V] -> [...].
torch::Tensor log_z_squared(const torch::Tensor& logits);

}  // namespace inkstone
