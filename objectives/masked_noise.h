// Masked (absorbing) noise, MDLM (docs/diffusion.md, "Masked NELBO"): with probability 1 − α_t a token becomes
// the mask token (μ = 1 − α, υ ≡ 0), and the NELBO is that of the SUBS parameterisation.
#pragma once
#include "objectives/noise_process.h"

namespace inkstone {

// ℓ = (−α'/(1 − α)) · (−log x̂_x) · [z = m]  (MDLM, Sahoo et al. 2024).
// log_x_hat: [..., V] log x̂ under SUBS, i.e. −inf at the mask and at every id outside the support; x, z: [...]
// int64; alpha, alpha_prime: broadcastable to x, 0 < α < 1. Returns ℓ [...] in log_x_hat's dtype.
torch::Tensor masked_nelbo_per_token(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                     int64_t mask_id, const torch::Tensor& alpha, const torch::Tensor& alpha_prime);

class MaskedNoise : public NoiseProcess {
 public:
  using NoiseProcess::NoiseProcess;
  NoiseLevels levels(const torch::Tensor& t) const override;
  NoiseLevels rates(const torch::Tensor& t) const override;
  bool masks() const override { return true; }
  bool spreads() const override { return false; }
  // The form above with α = α_t, α' = α'_t; no IS part.
  DiffusionTokenTerms token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                  const NoiseLevels& level, const NoiseLevels& rate,
                                  const NoiseIds& ids) const override;
};

}  // namespace inkstone
