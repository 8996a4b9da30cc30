// Rotary position embedding, rotate-half layout (Su et al. 2021, RoFormer eq. 34; coordinate j pairs with
// j + h_d/2): with ω_j = θ^(−2j/h_d), position m maps (a, b) = (x_j, x_{j+h_d/2}) to
// (a cos mω_j − b sin mω_j, b cos mω_j + a sin mω_j), so ⟨R_m q, R_n k⟩ depends only on m − n.
#pragma once
#include <string>

#include <torch/types.h>

#include "config/config.h"

namespace inkstone {

// Scaled frequencies for contexts longer than the base model's (docs/rope.md, "Scaling"): linear divides every
// ω_j by the factor (position interpolation); llama3 divides the long wavelengths (2π/ω_j > original_max_len / low)
// by it, keeps the short ones (< original_max_len / high) and blends linearly in 1/wavelength between.
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_len = 8192;
};

// ω_j = θ^(−2j/h_d), j < h_d/2, after the scaling; float64 [h_d/2].
torch::Tensor rope_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

// The rotation as two full-width factors, so that R_m x = x ⊙ cos + swap(x) ⊙ sin with swap(a, b) = (b, a):
// cos = (cos mω, cos mω), sin = (−sin mω, sin mω). Built once per forward and shared by all layers; two
// multiplies and an add per coordinate (a·cos + b·(−sin) rounds exactly as a·cos − b·sin).
struct RopeTable {
  torch::Tensor cos;  // [B, 1, T, h_d] fp32
  torch::Tensor sin;
};

// positions: [B, T] int64. Angles are formed in float64 so that long positions keep their precision.
RopeTable rope_table(const torch::Tensor& positions, int64_t head_dim, double theta,
                     const RopeScaling& scaling = {});

// The same from frequencies already on positions' device (rope_frequencies): no host-to-device copy, so that a
// captured CUDA graph can replay it.
RopeTable rope_table(const torch::Tensor& positions, const torch::Tensor& omega);

// x: [B, H, T, h_d]; returns x rotated, in x's dtype and layout, by the fused op of models/kernels/rope.h (float32
// arithmetic for float32 and bf16, float64 for float64).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table);

}  // namespace inkstone
