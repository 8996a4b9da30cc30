#include "sampler/diffusion_posterior.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor interpolating_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, const NoiseLevelsAt& at_t,
                                      const NoiseLevelsAt& at_s, const torch::Tensor& support, int64_t mask_id) {
  // N as a 0-d tensor on the device: reading it to the host would wait for the device at every step.
  const auto n = support.sum().to(x_hat.scalar_type());
  const auto member = support.to(x_hat.scalar_type());
  auto mask = torch::zeros_like(member);
  if (mask_id >= 0) mask[mask_id] = 1.0;
  const auto noise_mass = [&](const NoiseLevelsAt& at) { return at.mask * mask + at.uniform * member / n; };
  const auto noise_t = noise_mass(at_t), noise_s = noise_mass(at_s);  // (βπ) [V]
  const double kept_share = at_t.keep / at_s.keep;
  const auto z = z_t.unsqueeze(-1);
  const auto gamma = (noise_t - kept_share * noise_s).index({z_t}).unsqueeze(-1);  // [..., 1]
  const auto at_z = torch::zeros_like(x_hat).scatter_(-1, z, 1.0);                    // e_{z_t}
  const auto p_t_z = at_t.keep * x_hat.gather(-1, z) + noise_t.index({z_t}).unsqueeze(-1);
  const auto q = (kept_share * at_z + gamma) * (at_s.keep * x_hat + noise_s) / p_t_z;
  return torch::where(gamma > 0, q, at_z);
}

torch::Tensor exponential_race(const torch::Tensor& probs, at::Generator& generator) {
  auto u = torch::empty(probs.sizes(), probs.options());
  u.uniform_(0.0, 1.0, generator);
  const auto e = -(u + 1e-10).log() + 1e-10;
  return (probs / e).argmax(-1);
}

}  // namespace inkstone
