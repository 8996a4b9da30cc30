#include "objectives/noise_schedule.h"

#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"

namespace inkstone {
namespace {

class LogLinearSchedule : public NoiseSchedule {
 public:
  explicit LogLinearSchedule(double eps) : eps_(eps) {}
  torch::Tensor alpha(const torch::Tensor& t) const override { return 1.0 - (1.0 - eps_) * t; }
  torch::Tensor alpha_prime(const torch::Tensor& t) const override {
    return torch::full_like(t, -(1.0 - eps_));
  }

 private:
  double eps_;
};

class CosineSchedule : public NoiseSchedule {
 public:
  explicit CosineSchedule(double eps) : eps_(eps) {}
  torch::Tensor alpha(const torch::Tensor& t) const override { return 1.0 - torch::cos(phase(t)); }
  torch::Tensor alpha_prime(const torch::Tensor& t) const override {
    return -(M_PI / 2) * (1.0 - eps_) * torch::sin(phase(t));
  }

 private:
  torch::Tensor phase(const torch::Tensor& t) const { return (M_PI / 2) * (1.0 - (1.0 - eps_) * t); }
  double eps_;
};

class LogSnrSchedule : public NoiseSchedule {
 public:
  LogSnrSchedule(double lambda_min, double lambda_max) : lambda_min_(lambda_min), lambda_max_(lambda_max) {}
  torch::Tensor alpha(const torch::Tensor& t) const override { return torch::sigmoid(log_snr(t)); }
  torch::Tensor alpha_prime(const torch::Tensor& t) const override {
    auto a = alpha(t);
    return a * (1.0 - a) * (lambda_min_ - lambda_max_);
  }

 private:
  torch::Tensor log_snr(const torch::Tensor& t) const { return lambda_max_ + t * (lambda_min_ - lambda_max_); }
  double lambda_min_, lambda_max_;
};

}  // namespace

torch::Tensor NoiseSchedule::log_snr_rate(const torch::Tensor& t) const {
  auto a = alpha(t);
  return alpha_prime(t) / (a * (1.0 - a));
}

std::unique_ptr<NoiseSchedule> make_noise_schedule(const DiffusionConfig& config) {
  switch (config.schedule) {
    case NoiseScheduleKind::log_linear: return std::make_unique<LogLinearSchedule>(config.schedule_eps);
    case NoiseScheduleKind::cosine: return std::make_unique<CosineSchedule>(config.schedule_eps);
    case NoiseScheduleKind::log_snr: return std::make_unique<LogSnrSchedule>(config.log_snr_min, config.log_snr_max);
  }
  throw std::logic_error("a diffusion.schedule without a schedule");
}

}  // namespace inkstone
