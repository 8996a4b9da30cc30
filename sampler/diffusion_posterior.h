// One reverse step of discrete diffusion in float64: the posterior q(z_s | z_t, x̂) of any interpolating noise
// process (objectives/noise_process.h), and the exponential-race draw from it (docs/diffusion.md: "Posterior",
// "Precision").
#pragma once
#include <ATen/core/Generator.h>
#include <torch/types.h>

#include "objectives/noise_process.h"

namespace inkstone {

// For s < t, with (βπ)_v = μ [v = m] + υ/N [v ∈ S] the noise's mass on v, the forward marginals q_t(· | x) =
// α_t e_x + (βπ)_t are those of a Markov chain whose step from s to t keeps a token with probability α_t/α_s and
// otherwise draws from (βπ)_t − (α_t/α_s)(βπ)_s (GIDD, Proposition 3.2; ≥ 0 for the processes here). Bayes' rule
// with z_s ~ p_s = α_s x̂ + (βπ)_s gives
//   q(v | z, x̂) = (α_t/α_s [v = z] + γ_z) p_s(v) / p_t(z),   γ_z = (βπ)_t(z) − (α_t/α_s)(βπ)_s(z),
// and p_t(z) = α_t x̂_z + (βπ)_t(z) is its normaliser. Where γ_z = 0 only z itself leads to z (an unmasked token
// under masked noise): the position is settled and q is the point mass on z. Uniform noise (μ = 0) gives UDLM's
// posterior, masked noise (υ = 0) MDLM's; α_s = 1 gives the final draw q(x | z_t, x̂).
// x_hat: [..., V] float64, zero outside the support S (|S| = N) and at m; z_t: [...] int64 in S ∪ {m};
// support: [V] bool; mask_id: m (−1: none, then μ must be 0). Each row of the result sums to 1.
torch::Tensor interpolating_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, const NoiseLevelsAt& at_t,
                                      const NoiseLevelsAt& at_s, const torch::Tensor& support, int64_t mask_id);

// One draw per row of probabilities [..., V] by an exponential race: argmax_v q_v / E_v with
// E_v = −log(U_v + 1e-10) + 1e-10, U uniform in float64 — Gumbel-max on log q without losing the tail to
// low precision (docs/diffusion.md, "Precision"; arXiv 2409.02908).
torch::Tensor exponential_race(const torch::Tensor& probs, at::Generator& generator);

}  // namespace inkstone
