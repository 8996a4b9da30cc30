// Uniform noise (UDLM, Duo, GIDD; docs/diffusion.md, "Uniform NELBO"): with probability 1 − α_t a token is
// replaced by a uniform draw from the noise support (which may return the token itself): μ ≡ 0, υ = 1 − α.
#pragma once
#include "objectives/noise_process.h"

namespace inkstone {

// The per-token NELBO in closed form (docs/diffusion.md, "Closed form"; Duo's nll_per_token), with a = α_t,
// a' = α'_t, δ = [z = x]:
//   x̄_j = N a x̂_j + 1 − a,  S = Σ_{j∈support} log x̄_j,  c = (1 − a)/(N a + 1 − a)
//   T1 = N (1/(1 − a + N a δ) − 1/x̄_z)
//   T2 = c (N log x̄_z − S) + (N − 1) c log c                                   if δ = 1
//   T2 = (N log x̄_z − S) + (N a/(1 − a))(log x̄_z − log x̄_x) − (log c)/c       if δ = 0
//   ℓ  = a'/(N a) · (T1 − T2)
// log_x_hat: [..., V] log x̂, −inf at the V − N ids outside the support; x, z: [...] int64 ids in the support;
// alpha, alpha_prime: broadcastable to x, 0 < α < 1. Returns ℓ [...] ≥ 0 in log_x_hat's dtype.
torch::Tensor uniform_nelbo_per_token(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                      const torch::Tensor& alpha, const torch::Tensor& alpha_prime,
                                      int64_t support_size);
// ℓ and its IS-divergence part −a'/(a N q_z) · (r − log r − 1) (the second term of the KL form below), from the
// same x̄: GIDD weights the two parts separately (docs/diffusion.md, "Training weights").
DiffusionTokenTerms uniform_token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                        const torch::Tensor& alpha, const torch::Tensor& alpha_prime,
                                        int64_t support_size);

// The KL form (docs/diffusion.md, "KL form"), the float64 test oracle: with q = a e_x + (1 − a)/N,
// p = a x̂ + (1 − a)/N, r = q_z/p_z,
//   ℓ = −a'/(a N q_z) · [KL(q‖p) + r − log r − 1].
// x_hat: [N] probabilities over the support; x, z index into it.
double uniform_nelbo_kl_form(const torch::Tensor& x_hat, int64_t x, int64_t z, double alpha, double alpha_prime);

class UniformNoise : public NoiseProcess {
 public:
  using NoiseProcess::NoiseProcess;
  NoiseLevels levels(const torch::Tensor& t) const override;
  NoiseLevels rates(const torch::Tensor& t) const override;
  bool masks() const override { return false; }
  bool spreads() const override { return true; }
  // The closed form above with a = α_t, a' = α'_t.
  DiffusionTokenTerms token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                  const NoiseLevels& level, const NoiseLevels& rate,
                                  const NoiseIds& ids) const override;
};

}  // namespace inkstone
