#include "objectives/diffusion_time.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "core/host_copy.h"

namespace inkstone {

torch::Tensor stratified_uniform(int64_t first, int64_t count, int64_t total, torch::Device device) {
  if (first < 0 || count < 1 || first + count > total)
    throw std::invalid_argument(fmt::format("draws [{}, {}) are not inside a batch of {}", first, first + count,
                                            total));
  const auto options = torch::TensorOptions().dtype(torch::kDouble).device(device);
  auto index = torch::arange(first, first + count, options);
  // The remainder guards the top stratum against (U + total − 1)/total rounding up to 1.
  return torch::remainder((torch::rand({count}, options) + index) / static_cast<double>(total), 1.0);
}

torch::Tensor per_token_time_rows(double time_mix, int64_t first_row, int64_t rows, torch::Device device) {
  const auto index = torch::arange(first_row, first_row + rows, torch::TensorOptions().dtype(torch::kDouble));
  return to_device_async(torch::floor((index + 1) * time_mix).gt(torch::floor(index * time_mix)), device);
}

torch::Tensor sample_training_time(const DiffusionConfig& config, int64_t rows, int64_t length, int64_t first_row,
                                   int64_t total_rows, torch::Device device) {
  if (total_rows == 0) total_rows = rows;
  const auto options = torch::TensorOptions().dtype(torch::kDouble).device(device);
  // u for `count` draws starting at `first` of `total`.
  const auto uniform = [&](int64_t first, int64_t count, int64_t total) {
    if (config.time_sampling == TimeSampling::stratified) return stratified_uniform(first, count, total, device);
    return torch::rand({count}, options);  // TimeSampling::iid
  };
  auto u = uniform(first_row, rows, total_rows).view({rows, 1});
  if (config.time_mix > 0) {
    const auto per_token = uniform(first_row * length, rows * length, total_rows * length).view({rows, length});
    u = torch::where(per_token_time_rows(config.time_mix, first_row, rows, device).unsqueeze(1), per_token, u);
  }
  return (config.t_min + (1.0 - config.t_min) * u).to(torch::kFloat).contiguous();
}

torch::Tensor per_block_times(const torch::Tensor& block_times, int64_t rows, int64_t length) {
  const int64_t blocks = block_times.size(0) / rows;
  return block_times.expand({block_times.size(0), length / blocks}).reshape({rows, length});
}

torch::Tensor eval_time_grid(double t_min, int64_t rows) {
  auto u = (torch::arange(rows, torch::kDouble) + 0.5) / static_cast<double>(rows);
  return (t_min + (1.0 - t_min) * u).to(torch::kFloat).unsqueeze(1);
}

}  // namespace inkstone
