// GIDD's mixture of masked and uniform noise (von Rütte et al. 2025, "Generalized Interpolating Discrete
// Diffusion", section 4; docs/diffusion.md, "Mixture noise"): a corrupted token becomes the mask or a uniform draw
// from the support, the uniform share largest halfway through the schedule, so that the model learns to correct
// tokens as well as to fill masks. With a = the schedule's α_t and
//   c = B (a (1 − a))^{γ/2},  B = 2^γ p_u / (1 − p_u),  C = 1 + c,
//   α_t = a / C,  μ_t = (1 − a) / C,  υ_t = c / C,
// so at a = ½ a fraction p_u of the tokens are uniform draws (υ = p_u); p_u = diffusion.mixture_uniform,
// γ = diffusion.mixture_gamma. On the log-linear schedule with eps = 0 (a = 1 − t) this is GIDD's process exactly.
#pragma once
#include "objectives/noise_process.h"

namespace inkstone {

// The per-token NELBO of an interpolating process (GIDD, Theorem 3.6), with q = q_t(· | x) and p = q_t(· | x̂)
// = α x̂ + μ e_m + υ/N 𝟙_S, r = q_z / p_z:
//   ℓ = w(z, x) · [KL(q ‖ p) + r − log r − 1],   w(z, x) = [(βπ)'_z − (α'/α) (βπ)_z] / q_z,
// (βπ)_z = μ [z = m] + υ/N [z ∈ S] the noise's mass on z. Over S with y_v = log x̂_v + log(α N / υ), log p_v =
// log(υ/N) + softplus(y_v), and the KL's terms off x are −(υ/N) softplus(y_v), so
//   KL = −(υ/N) (Σ_{v∈S} softplus(y_v) − softplus(y_x)) + q_x (log q_x − log p_x),   q_x = α + υ/N
// (the mask adds nothing: q_m = p_m = μ). Needs υ > 0. Tensors as NoiseProcess::token_terms; the IS part is
// w · (r − log r − 1).
DiffusionTokenTerms interpolating_token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x,
                                              const torch::Tensor& z, const NoiseLevels& level,
                                              const NoiseLevels& rate, const NoiseIds& ids);

class MixtureNoise : public NoiseProcess {
 public:
  explicit MixtureNoise(const DiffusionConfig& config);
  NoiseLevels levels(const torch::Tensor& t) const override;
  // With c' = c (γ/2)(1 − 2a)/(a (1 − a)) · a': α' = (a' C − a c')/C², μ' = −(a' C + (1 − a) c')/C², υ' = c'/C².
  NoiseLevels rates(const torch::Tensor& t) const override;
  bool masks() const override { return true; }
  bool spreads() const override { return true; }
  DiffusionTokenTerms token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                  const NoiseLevels& level, const NoiseLevels& rate,
                                  const NoiseIds& ids) const override {
    return interpolating_token_terms(log_x_hat, x, z, level, rate, ids);
  }

 private:
  torch::Tensor spread(const torch::Tensor& a) const;  // c(a)
  double b_;      // B
  double gamma_;  // γ
};

}  // namespace inkstone
