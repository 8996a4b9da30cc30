#include "objectives/uniform_noise.h"

#include <cmath>

namespace inkstone {

DiffusionTokenTerms uniform_token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                        const torch::Tensor& alpha, const torch::Tensor& alpha_prime,
                                        int64_t support_size) {
  const double n = static_cast<double>(support_size);
  const auto a = alpha.to(log_x_hat.scalar_type());
  const auto a_prime = alpha_prime.to(log_x_hat.scalar_type());
  const auto log_one_minus_a = torch::log1p(-a);
  // log x̄ as a log-sum-exp, so that x̂_j = 0 gives exactly log(1 − a): the V − N ids outside the support then
  // add exactly (V − N) log(1 − a) to the sum, which S takes off again.
  const auto log_x_bar =
      torch::logaddexp(log_x_hat + torch::log(n * a).unsqueeze(-1), log_one_minus_a.unsqueeze(-1));
  const auto s = log_x_bar.sum(-1) - static_cast<double>(log_x_hat.size(-1) - support_size) * log_one_minus_a;
  const auto log_x_bar_z = log_x_bar.gather(-1, z.unsqueeze(-1)).squeeze(-1);
  const auto log_x_bar_x = log_x_bar.gather(-1, x.unsqueeze(-1)).squeeze(-1);
  const auto same = z.eq(x);  // δ: a resample that landed on x counts as unchanged (docs/diffusion.md, "Pitfalls")

  const auto c_den = n * a + (1.0 - a);
  const auto c = (1.0 - a) / c_den;
  const auto log_c = log_one_minus_a - torch::log(c_den);
  const auto t1 = n * (torch::where(same, 1.0 / c_den, 1.0 / (1.0 - a)) - torch::exp(-log_x_bar_z));
  const auto spread = n * log_x_bar_z - s;
  // Both branches are computed and selected, never multiplied by δ: (log c)/c overflows as a → 1
  // (docs/diffusion.md, "Pitfalls").
  const auto t2_same = c * spread + (n - 1.0) * c * log_c;
  const auto t2_moved = spread + (n * a / (1.0 - a)) * (log_x_bar_z - log_x_bar_x) - log_c / c;
  DiffusionTokenTerms terms;
  terms.nelbo = a_prime / (n * a) * (t1 - torch::where(same, t2_same, t2_moved));
  // N q_z = N a δ + 1 − a and N p_z = x̄_z, so r = N q_z / x̄_z.
  const auto n_q_z = torch::where(same, c_den, 1.0 - a);
  const auto log_r = torch::log(n_q_z) - log_x_bar_z;
  terms.is_divergence = -a_prime / (a * n_q_z) * (log_r.exp() - log_r - 1.0);
  return terms;
}

torch::Tensor uniform_nelbo_per_token(const torch::Tensor& log_x_hat, const torch::Tensor& x, const torch::Tensor& z,
                                      const torch::Tensor& alpha, const torch::Tensor& alpha_prime,
                                      int64_t support_size) {
  return uniform_token_terms(log_x_hat, x, z, alpha, alpha_prime, support_size).nelbo;
}

double uniform_nelbo_kl_form(const torch::Tensor& x_hat, int64_t x, int64_t z, double alpha, double alpha_prime) {
  const auto p_hat = x_hat.to(torch::kDouble);
  const double n = static_cast<double>(p_hat.numel());
  auto q = torch::full({p_hat.numel()}, (1.0 - alpha) / n, torch::kDouble);
  q[x] += alpha;
  const auto p = alpha * p_hat + (1.0 - alpha) / n;
  const double kl = (q * (q.log() - p.log())).sum().item<double>();
  const double q_z = q[z].item<double>();
  const double r = q_z / p[z].item<double>();
  return -alpha_prime / (alpha * n * q_z) * (kl + r - std::log(r) - 1.0);
}

NoiseLevels UniformNoise::levels(const torch::Tensor& t) const {
  const auto alpha = schedule().alpha(t);
  return {alpha, torch::zeros_like(alpha), 1.0 - alpha};
}

NoiseLevels UniformNoise::rates(const torch::Tensor& t) const {
  const auto alpha_prime = schedule().alpha_prime(t);
  return {alpha_prime, torch::zeros_like(alpha_prime), -alpha_prime};
}

DiffusionTokenTerms UniformNoise::token_terms(const torch::Tensor& log_x_hat, const torch::Tensor& x,
                                              const torch::Tensor& z, const NoiseLevels& level,
                                              const NoiseLevels& rate, const NoiseIds& ids) const {
  return uniform_token_terms(log_x_hat, x, z, level.keep, rate.keep, ids.support_size);
}

}  // namespace inkstone
