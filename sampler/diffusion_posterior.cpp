#include "sampler/diffusion_posterior.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor uniform_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, double alpha_t,
                                double alpha_s, const torch::Tensor& support) {
  // N as a 0-d tensor on the device: reading it to the host would wait for the device at every step.
  const auto n = support.sum().to(x_hat.scalar_type());
  const auto at_z = torch::zeros_like(x_hat).scatter_(-1, z_t.unsqueeze(-1), 1.0);  // e_{z_t}
  const auto x_hat_z = x_hat.gather(-1, z_t.unsqueeze(-1));                         // x̂_{z_t}, [..., 1]
  const auto uniform = support.to(x_hat.scalar_type()) * ((1.0 - alpha_t / alpha_s) * (1.0 - alpha_s)) / n;
  const auto num = n * alpha_t * x_hat * at_z + (alpha_t / alpha_s - alpha_t) * at_z + (alpha_s - alpha_t) * x_hat +
                   uniform;
  const auto den = n * alpha_t * x_hat_z + (1.0 - alpha_t);
  return num / den;
}

torch::Tensor masked_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, double alpha_t, double alpha_s,
                               int64_t mask_id) {
  const auto unmask = x_hat * ((alpha_s - alpha_t) / (1.0 - alpha_t));
  const auto stay_masked =
      torch::zeros_like(x_hat).index_fill_(-1, torch::tensor({mask_id}, z_t.options()), (1.0 - alpha_s) / (1.0 - alpha_t));
  const auto copy = torch::zeros_like(x_hat).scatter_(-1, z_t.unsqueeze(-1), 1.0);
  return torch::where(z_t.eq(mask_id).unsqueeze(-1), unmask + stay_masked, copy);
}

torch::Tensor exponential_race(const torch::Tensor& probs, at::Generator& generator) {
  auto u = torch::empty(probs.sizes(), probs.options());
  u.uniform_(0.0, 1.0, generator);
  const auto e = -(u + 1e-10).log() + 1e-10;
  return (probs / e).argmax(-1);
}

}  // namespace inkstone
