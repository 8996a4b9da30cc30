// The log-probability of one reverse diffusion step's draw, log q(z_s | z_t, x̂), read at the drawn token alone
// (docs/diffusion.md, "Posterior"; the whole distribution is sampler/diffusion_posterior.h's). With
// (βπ)(v) = μ [v = m] + υ/N [v ∈ S] the noise's mass on v, a = α_t/α_s and γ = (βπ)_t(z_t) − a (βπ)_s(z_t):
//   q(z_s | z_t, x̂) = (a [z_s = z_t] + γ) (α_s x̂_{z_s} + (βπ)_s(z_s)) / (α_t x̂_{z_t} + (βπ)_t(z_t)),
// which needs x̂ at z_s and at z_t only, never the [V] posterior. Where γ ≤ 0 the position is settled (an unmasked
// token under masked noise): q is the point mass on z_t, and its log-probability 0. A trajectory's log-probability
// is the sum of these over its steps and positions: the exact likelihood of the sampler's own transitions
// (docs/rl.md, "Diffusion policies").
#pragma once
#include <torch/types.h>

#include "objectives/noise_process.h"

namespace inkstone {

// x_hat_drawn = x̂_{z_s}, x_hat_current = x̂_{z_t} (0 at the mask, which x̂ never proposes); z_t, z_s ids; `at_t`,
// `at_s` the levels, each broadcastable to the ids; n the support size N. Differentiable in x̂, with no NaN in the
// gradient at settled positions.
torch::Tensor transition_log_prob(const torch::Tensor& x_hat_drawn, const torch::Tensor& x_hat_current,
                                  const torch::Tensor& z_t, const torch::Tensor& z_s, const NoiseLevels& at_t,
                                  const NoiseLevels& at_s, int64_t mask_id, int64_t n);

}  // namespace inkstone
