// The signal level alpha_t of a discrete diffusion process (docs/diffusion.md, "Noise schedules"): one object
// serves noising, the loss and the sampler, so the three can never disagree about the schedule.
#pragma once
#include <memory>

#include <torch/types.h>

#include "config/config.h"

namespace inkstone {

// alpha_0 = 1 (clean) falls to alpha_1 ~ 0; alpha'_t < 0. Works on tensors of any dtype and shape.
class NoiseSchedule {
 public:
  virtual ~NoiseSchedule() = default;
  virtual torch::Tensor alpha(const torch::Tensor& t) const = 0;
  virtual torch::Tensor alpha_prime(const torch::Tensor& t) const = 0;
  // d lambda / dt of the log-SNR lambda = log(alpha / (1 - alpha)): alpha' / (alpha (1 - alpha)), < 0.
  torch::Tensor log_snr_rate(const torch::Tensor& t) const;
};

// log_linear:  alpha = 1 - (1 - eps) t                      alpha' = -(1 - eps)
// cosine:      alpha = 1 - cos(pi/2 (1 - (1 - eps) t))      alpha' = -(pi/2)(1 - eps) sin(pi/2 (1 - (1 - eps) t))
//              (Duo's form with the exact chain factor, which Duo drops)
// log_snr:     lambda = lambda_max + t (lambda_min - lambda_max), alpha = sigmoid(lambda),
//              alpha' = alpha (1 - alpha) (lambda_min - lambda_max)   (GIDD's alpha = sigmoid(lambda))
std::unique_ptr<NoiseSchedule> make_noise_schedule(const DiffusionConfig& config);

}  // namespace inkstone
