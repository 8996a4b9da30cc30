// The auxiliary z-loss of PaLM (Chowdhery et al. 2022, "Training instability"): with Z = Σ_v exp(logit_v), the
// term log²Z per token pulls the softmax normaliser towards 1, so that the logits cannot drift as a whole, which
// bf16 logits and long runs otherwise allow. Weighted by objective.z_loss (Sumi: 1e-5) and added to the loss of
// the same units the objective averages over; docs/training.md, "z-loss".
#pragma once
#include <torch/types.h>

#include "objectives/objective.h"

namespace inkstone {

// (log Σ_v exp logits_v)² over the last dimension, in float32: [..., V] -> [...].
torch::Tensor log_z_squared(const torch::Tensor& logits);

// Adds weight · Σ sums to out.loss_sum and logs the unweighted mean log²Z as the metric `log_z_squared`.
// sums: [...] per-unit log²Z, 0 on units that do not count.
void add_z_loss(LossOutput& out, const torch::Tensor& sums, double weight);

}  // namespace inkstone
