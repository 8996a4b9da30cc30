#include "objectives/transition_log_prob.h"

namespace inkstone {

torch::Tensor transition_log_prob(const torch::Tensor& x_hat_drawn, const torch::Tensor& x_hat_current,
                                  const torch::Tensor& z_t, const torch::Tensor& z_s, const NoiseLevels& at_t,
                                  const NoiseLevels& at_s, int64_t mask_id, int64_t n) {
  const auto noise_mass = [&](const torch::Tensor& v, const NoiseLevels& at) {
    const auto masked = v.eq(mask_id).to(at.mask.scalar_type());
    return at.mask * masked + at.uniform / static_cast<double>(n) * (1.0 - masked);
  };
  const auto kept_share = at_t.keep / at_s.keep;
  const auto gamma = noise_mass(z_t, at_t) - kept_share * noise_mass(z_t, at_s);
  const auto moving = gamma > 0;
  const auto same = z_s.eq(z_t).to(gamma.scalar_type());
  // Settled positions divide by 1 instead: their p_t(z) can be 0 in float (x̂_z underflows), and a NaN there would
  // reach the gradient through where().
  const auto p_t = torch::where(moving, at_t.keep * x_hat_current + noise_mass(z_t, at_t), torch::ones_like(gamma));
  const auto q = (kept_share * same + gamma) * (at_s.keep * x_hat_drawn + noise_mass(z_s, at_s)) / p_t;
  return torch::where(moving, q, torch::ones_like(q)).log();
}

}  // namespace inkstone
