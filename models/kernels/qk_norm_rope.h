// Qwen3's per-head QK-norm followed by the rotary embedding (models/kernels/qk_norm_rope_row.h) as one autograd op:
// the CUDA kernel on a GPU, its CPU twin on the CPU. The composite normalised a copy of each projection, rounded it,
// and rotated it in a second pass, keeping the normalised copy; the op reads the projection once, writes the
// rotated result once, and keeps only the projection (a view autograd holds anyway) and one r per row.
#pragma once
#include <torch/types.h>

namespace inkstone {

// Whether the fused op takes x ([B, H, T, h_d]) with this weight: float32, bf16 or float64 on the CPU or (in a CUDA
// build) a GPU, h_d even and at most kQkNormRopeMaxWidth.
bool fused_qk_norm_rope_applies(const torch::Tensor& x);

// RoPE(RMSNorm(x) ⊙ weight) over the last dimension. x: [B, H, T, h_d], any strides with a contiguous last
// dimension; weight: [h_d]; cos, sin: [B or 1, 1, T, h_d] float32 (models/rope.h). The result has x's dtype, laid
// out as [B, T, H, h_d] seen as [B, H, T, h_d]. The gradient reaches x and weight and is not itself differentiable.
torch::Tensor fused_qk_norm_rope(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                                 const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace inkstone
