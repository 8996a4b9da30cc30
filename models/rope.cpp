#include "models/rope.h"

#include <torch/torch.h>

#include "models/kernels/rope.h"

namespace inkstone {

torch::Tensor rope_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  const auto j = torch::arange(head_dim / 2, torch::kDouble);
  const auto omega = torch::pow(theta, -2.0 * j / static_cast<double>(head_dim));
  if (scaling.kind == RopeScalingKind::none) return omega;
  if (scaling.kind == RopeScalingKind::linear) return omega / scaling.factor;
  // llama3
  const double context = static_cast<double>(scaling.original_max_len);
  const auto wavelength = 2 * M_PI / omega;
  // smooth = 0 at wavelength context/low (fully scaled), 1 at context/high (kept).
  const auto smooth = ((context / wavelength - scaling.low_freq_factor) /
                       (scaling.high_freq_factor - scaling.low_freq_factor))
                          .clamp(0.0, 1.0);
  return (1 - smooth) * omega / scaling.factor + smooth * omega;
}

RopeTable rope_table(const torch::Tensor& positions, int64_t head_dim, double theta, const RopeScaling& scaling) {
  TORCH_CHECK(head_dim % 2 == 0, "RoPE needs an even head_dim, got ", head_dim);
  return rope_table(positions, rope_frequencies(head_dim, theta, scaling).to(positions.device()));
}

RopeTable rope_table(const torch::Tensor& positions, const torch::Tensor& omega) {
  const auto angles = positions.to(torch::kDouble).unsqueeze(-1) * omega;  // [B, T, h_d/2]
  const auto cos = angles.cos().to(torch::kFloat).unsqueeze(1);  // [B, 1, T, h_d/2]
  const auto sin = angles.sin().to(torch::kFloat).unsqueeze(1);
  return {torch::cat({cos, cos}, -1), torch::cat({-sin, sin}, -1)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table) { return fused_rope(x, table.cos, table.sin); }

}  // namespace inkstone
