#include "models/rope.h"

#include <torch/torch.h>

namespace inkstone {

RopeTable rope_table(const torch::Tensor& positions, int64_t head_dim, double theta) {
  TORCH_CHECK(head_dim % 2 == 0, "RoPE needs an even head_dim, got ", head_dim);
  const auto f64 = positions.options().dtype(torch::kDouble);
  const auto j = torch::arange(head_dim / 2, f64);
  const auto omega = torch::pow(theta, -2.0 * j / static_cast<double>(head_dim));
  const auto angles = positions.to(torch::kDouble).unsqueeze(-1) * omega;  // [B, T, h_d/2]
  const auto cos = angles.cos().to(torch::kFloat).unsqueeze(1);  // [B, 1, T, h_d/2]
  const auto sin = angles.sin().to(torch::kFloat).unsqueeze(1);
  return {torch::cat({cos, cos}, -1), torch::cat({-sin, sin}, -1)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table) {
  const auto x32 = x.to(torch::kFloat);
  const auto halves = x32.chunk(2, -1);
  const auto swapped = torch::cat({halves[1], halves[0]}, -1);
  return (x32 * table.cos + swapped * table.sin).to(x.scalar_type());
}

}  // namespace inkstone
