// What the per-head kernels' wrappers (rotary embedding, QK-norm) read of a [B, H, T, h_d] tensor: the strides of
// its first three dimensions, and a contiguous last dimension.
#pragma once
#include <vector>

#include <torch/types.h>

#include "models/kernels/rope_row.h"

namespace inkstone {

// Element strides of the batch, head and time dimensions; 0 where a dimension is 1 (a broadcast table).
inline kernels::RopeStrides head_strides(const torch::Tensor& t) {
  return {t.size(0) == 1 ? 0 : t.stride(0), t.size(1) == 1 ? 0 : t.stride(1), t.size(2) == 1 ? 0 : t.stride(2)};
}

// Refuses (c10::Error naming `op`) tables that are not the [B or 1, 1, T, h_d] float32 cos and sin of models/rope.h
// for x, on x's device.
inline void check_rope_tables(const char* op, const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin) {
  const std::vector<int64_t> table_shape{cos.size(0), 1, x.size(2), x.size(3)};
  TORCH_CHECK(cos.sizes() == sin.sizes() && cos.sizes() == table_shape &&
                  (cos.size(0) == 1 || cos.size(0) == x.size(0)) && cos.scalar_type() == torch::kFloat &&
                  sin.scalar_type() == torch::kFloat,
              op, ": cos and sin must be [B or 1, 1, T, h_d] float32 for x of shape ", x.sizes());
  TORCH_CHECK(x.device() == cos.device() && x.device() == sin.device(), op, ": x and the tables on one device");
}

// The kernels read the last dimension as contiguous.
inline torch::Tensor with_unit_last_stride(const torch::Tensor& t) {
  return t.stride(-1) == 1 ? t : t.contiguous();
}

}  // namespace inkstone
