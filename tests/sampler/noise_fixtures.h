// The noise processes the diffusion sampler suites invert, on the log-linear schedule with ε = 1e-3, and the
// posteriors of uniform and masked noise at given signal levels.
#pragma once
#include <torch/torch.h>

#include <memory>

#include "config/config.h"
#include "objectives/masked_noise.h"
#include "objectives/mixture_noise.h"
#include "objectives/uniform_noise.h"
#include "sampler/diffusion_posterior.h"

namespace inkstone::testing {

enum class ToyNoise { uniform, masked, mixture };

// Mixture noise with p_u = 0.3, so that the uniform share is not small.
inline std::shared_ptr<const NoiseProcess> toy_noise(ToyNoise kind) {
  DiffusionConfig config = default_config().diffusion;
  config.schedule = NoiseScheduleKind::log_linear;
  config.schedule_eps = 1e-3;
  config.mixture_uniform = 0.3;
  switch (kind) {
    case ToyNoise::uniform: return std::make_shared<UniformNoise>(config);
    case ToyNoise::masked: return std::make_shared<MaskedNoise>(config);
    case ToyNoise::mixture: return std::make_shared<MixtureNoise>(config);
  }
  return nullptr;
}

// Uniform noise's posterior (μ = 0, υ = 1 − α) between signal levels α_t < α_s.
inline torch::Tensor uniform_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, double alpha_t,
                                       double alpha_s, const torch::Tensor& support) {
  return interpolating_posterior(x_hat, z_t, {alpha_t, 0.0, 1.0 - alpha_t}, {alpha_s, 0.0, 1.0 - alpha_s}, support,
                                 -1);
}

// Masked noise's posterior (μ = 1 − α, υ = 0); the support is every id but the mask.
inline torch::Tensor masked_posterior(const torch::Tensor& x_hat, const torch::Tensor& z_t, double alpha_t,
                                      double alpha_s, int64_t mask_id) {
  auto support = torch::ones({x_hat.size(-1)}, torch::kBool);
  support[mask_id] = false;
  return interpolating_posterior(x_hat, z_t, {alpha_t, 1.0 - alpha_t, 0.0}, {alpha_s, 1.0 - alpha_s, 0.0},
                                 support.to(x_hat.device()), mask_id);
}

}  // namespace inkstone::testing
