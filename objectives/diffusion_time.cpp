#include "objectives/diffusion_time.h"

#include <fmt/format.h>

#include "core/errors.h"

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

torch::Tensor sample_training_time(const DiffusionConfig& config, int64_t rows, int64_t cols, int64_t first_row,
                                   int64_t total_rows, torch::Device device) {
  if (total_rows == 0) total_rows = rows;
  torch::Tensor u;
  if (config.time_sampling == "stratified") {
    u = stratified_uniform(first_row * cols, rows * cols, total_rows * cols, device).view({rows, cols});
  } else if (config.time_sampling == "iid") {
    u = torch::rand({rows, cols}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  } else {
    throw InputError(fmt::format("unknown diffusion.time_sampling '{}'", config.time_sampling));
  }
  return (config.t_min + (1.0 - config.t_min) * u).to(torch::kFloat);
}

torch::Tensor eval_time_grid(double t_min, int64_t rows) {
  auto u = (torch::arange(rows, torch::kDouble) + 0.5) / static_cast<double>(rows);
  return (t_min + (1.0 - t_min) * u).to(torch::kFloat).unsqueeze(1);
}

}  // namespace inkstone
