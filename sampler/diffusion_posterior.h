// One reverse step of discrete diffusion in float64: the posteriors q(z_s | z_t, x̂) for uniform and absorbing
// noise, and the exponential-race draw from them (docs/diffusion.md: "Uniform posterior", "Masked posterior",
// "Precision").
#pragma once
#include <ATen/core/Generator.h>
#include <torch/types.h>

namespace inkstone {

// Uniform noise (docs/diffusion.md, "Uniform posterior"; multiplied through by N):
//   num = N α_t (x̂ ⊙ e_{z_t}) + (α_t/α_s − α_t) e_{z_t} + (α_s − α_t) x̂ + (1 − α_t/α_s)(1 − α_s)/N · 𝟙_S
//   den = N α_t x̂_{z_t} + 1 − α_t
// x_hat: [..., V] float64, zero outside the support S (|S| = N); z_t: [...] int64 in S; support: [V] bool.
// Each row of the result sums to 1; α_s = 1 gives the final draw q(x | z_t, x̂).
torch::Tensor uniform_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, double alpha_t,
                                double alpha_s, const torch::Tensor& support);

// Absorbing noise (docs/diffusion.md, "Masked posterior"): at a masked position
// p(v) = (α_s − α_t) x̂_v / (1 − α_t) for v ≠ m and p(m) = (1 − α_s) / (1 − α_t); an unmasked position stays itself.
// x_hat has zero mass on m.
torch::Tensor masked_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, double alpha_t, double alpha_s,
                               int64_t mask_id);

// One draw per row of probabilities [..., V] by an exponential race: argmax_v q_v / E_v with
// E_v = −log(U_v + 1e-10) + 1e-10, U uniform in float64 — Gumbel-max on log q without losing the tail to
// low precision (docs/diffusion.md, "Precision"; arXiv 2409.02908).
torch::Tensor exponential_race(const torch::Tensor& probs, at::Generator& generator);

}  // namespace inkstone
