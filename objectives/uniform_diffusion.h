// Uniform-noise discrete diffusion (UDLM, Duo, GIDD; docs/diffusion.md, "Uniform NELBO"): with probability
// 1 − α_t a token is replaced by a uniform draw from the noise support (which may return the token itself), and
// the model is trained on the continuous-time NELBO.
#pragma once
#include "objectives/diffusion_objective.h"

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

class UniformDiffusionObjective : public DiffusionObjective {
 public:
  using DiffusionObjective::DiffusionObjective;
  std::string name() const override { return "uniform_diffusion"; }
  DiffusionNoise noise() const override { return DiffusionNoise::uniform; }

 protected:
  // A uniform draw from the support, which may return x itself (docs/diffusion.md, "Uniform noise").
  torch::Tensor replacement(const torch::Tensor& x, at::Generator* generator) const override;
  DiffusionTokenTerms token_terms(const torch::Tensor& logits, const torch::Tensor& x, const torch::Tensor& z,
                                  const torch::Tensor& alpha, const torch::Tensor& alpha_prime) const override;
};

}  // namespace inkstone
