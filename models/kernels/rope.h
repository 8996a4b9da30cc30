// The rotary embedding (models/kernels/rope_row.h) as one autograd op: the CUDA kernel on a GPU, its CPU twin on
// the CPU. It replaces the composite x ⊙ cos + swap(x) ⊙ sin, whose casts, concatenation and broadcast products
// were a sixth of a bf16 training step's GPU time, and it keeps nothing for the backward but the tables.
#pragma once
#include <torch/types.h>

namespace inkstone {

// x: [B, H, T, h_d], any strides; cos, sin: [B or 1, 1, T, h_d] float32 (models/rope.h). The result has x's dtype
// and layout; float32 and bf16 are computed in float32 exactly as the composite rounds, float64 in float64. The
// gradient is computed by the same op and is not itself differentiable (no double backward).
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace inkstone
