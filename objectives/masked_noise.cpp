#include "objectives/masked_noise.h"

namespace inkstone {

torch::Tensor masked_nelbo_per_token(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                     int64_t mask_id, const torch::Tensor& alpha, const torch::Tensor& alpha_prime) {
  const auto a = alpha.to(log_x_hat.scalar_type());
  const auto a_prime = alpha_prime.to(log_x_hat.scalar_type());
  const auto nll = -log_x_hat.gather(-1, x.unsqueeze(-1)).squeeze(-1);
  // Unmasked positions carry z over (SUBS) and score nothing; selected, so no 0 · inf can reach the sum.
  return (-a_prime / (1.0 - a) * nll).masked_fill(z.ne(mask_id), 0.0);
}

NoiseLevels MaskedNoise::levels(const torch::Tensor& t) const {
  const auto alpha = schedule().alpha(t);
  return {alpha, 1.0 - alpha, torch::zeros_like(alpha)};
}

NoiseLevels MaskedNoise::rates(const torch::Tensor& t) const {
  const auto alpha_prime = schedule().alpha_prime(t);
  return {alpha_prime, -alpha_prime, torch::zeros_like(alpha_prime)};
}

DiffusionTokenTerms MaskedNoise::token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x,
                                             const torch::Tensor& z, const NoiseLevels& level,
                                             const NoiseLevels& rate, const NoiseIds& ids) const {
  DiffusionTokenTerms terms;
  terms.nelbo = masked_nelbo_per_token(log_x_hat, x, z, ids.mask_id, level.keep, rate.keep);
  return terms;
}

}  // namespace inkstone
