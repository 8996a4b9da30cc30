#include "objectives/noise_process.h"

namespace inkstone {

NoiseProcess::NoiseProcess(const DiffusionConfig& config) : schedule_(make_noise_schedule(config)) {}

NoiseLevelsAt NoiseProcess::levels_at(double t) const {
  const NoiseLevels at = levels(torch::full({}, t, torch::kDouble));
  return {at.keep.item<double>(), at.mask.item<double>(), at.uniform.item<double>()};
}

torch::Tensor NoiseProcess::log_snr_rate(const torch::Tensor& t) const {
  const auto alpha = levels(t).keep;
  return rates(t).keep / (alpha * (1.0 - alpha));
}

}  // namespace inkstone
