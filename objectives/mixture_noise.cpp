#include "objectives/mixture_noise.h"

#include <cmath>

#include <torch/torch.h>

namespace inkstone {

DiffusionTokenTerms interpolating_token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x,
                                              const torch::Tensor& z, const NoiseLevels& level,
                                              const NoiseLevels& rate, const NoiseIds& ids) {
  const auto in_dtype = [&](const torch::Tensor& v) { return v.to(log_x_hat.scalar_type()); };
  const double n = static_cast<double>(ids.support_size);
  const auto alpha = in_dtype(level.keep), mu = in_dtype(level.mask), spread = in_dtype(level.uniform) / n;
  const auto log_spread = torch::log(spread);  // log(υ/N): log p_v where x̂_v = 0
  // softplus(y_v) = log(p_v / (υ/N)); 0 wherever x̂_v = 0, so the V − N ids outside S add nothing to its sum.
  const auto lifted = torch::softplus(log_x_hat + (torch::log(alpha) - log_spread).unsqueeze(-1));
  const auto lifted_at = [&](const torch::Tensor& ids_at) { return lifted.gather(-1, ids_at.unsqueeze(-1)).squeeze(-1); };
  const auto lifted_x = lifted_at(x);
  const auto q_x = alpha + spread;
  const auto log_p_x = log_spread + lifted_x;
  const auto kl = -spread * (lifted.sum(-1) - lifted_x) + q_x * (torch::log(q_x) - log_p_x);

  // At z = m, q_z = p_z = μ (x̂ has no mass on the mask), so r = 1.
  const auto masked = z.eq(ids.mask_id);
  const auto log_mu = torch::log(mu);
  const auto log_q_z = torch::where(masked, log_mu, torch::where(z.eq(x), torch::log(q_x), log_spread));
  const auto log_p_z = torch::where(masked, log_mu, log_spread + lifted_at(z));
  const auto log_r = log_q_z - log_p_z;
  const auto is_term = log_r.exp() - log_r - 1.0;

  const auto noise_mass = torch::where(masked, mu, spread);
  const auto noise_rate = torch::where(masked, in_dtype(rate.mask), in_dtype(rate.uniform) / n);
  const auto weight = (noise_rate - in_dtype(rate.keep) / alpha * noise_mass) / log_q_z.exp();
  DiffusionTokenTerms terms;
  terms.nelbo = weight * (kl + is_term);
  terms.is_divergence = weight * is_term;
  return terms;
}

MixtureNoise::MixtureNoise(const DiffusionConfig& config)
    : NoiseProcess(config),
      b_(std::pow(2.0, config.mixture_gamma) * config.mixture_uniform / (1.0 - config.mixture_uniform)),
      gamma_(config.mixture_gamma) {}

torch::Tensor MixtureNoise::spread(const torch::Tensor& a) const { return b_ * (a * (1.0 - a)).pow(gamma_ / 2); }

NoiseLevels MixtureNoise::levels(const torch::Tensor& t) const {
  const auto a = schedule().alpha(t);
  const auto c = spread(a);
  const auto total = 1.0 + c;
  return {a / total, (1.0 - a) / total, c / total};
}

NoiseLevels MixtureNoise::rates(const torch::Tensor& t) const {
  const auto a = schedule().alpha(t);
  const auto a_prime = schedule().alpha_prime(t);
  const auto c = spread(a);
  const auto c_prime = c * (gamma_ / 2) * (1.0 - 2.0 * a) / (a * (1.0 - a)) * a_prime;
  const auto total = 1.0 + c;
  const auto total_squared = total * total;
  return {(a_prime * total - a * c_prime) / total_squared, -(a_prime * total + (1.0 - a) * c_prime) / total_squared,
          c_prime / total_squared};
}

}  // namespace inkstone
