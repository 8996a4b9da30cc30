// What the per-head kernels' wrappers (rotary embedding, QK-norm) read of a [B, H, T, h_d] tensor: the strides of
// its first three dimensions, and a contiguous last dimension.
#pragma once
#include <torch/types.h>

#include "models/kernels/rope_row.h"

namespace inkstone {

// Element strides of the batch, head and time dimensions; 0 where a dimension is 1 (a broadcast table).
inline kernels::RopeStrides head_strides(const torch::Tensor& t) {
  return {t.size(0) == 1 ? 0 : t.stride(0), t.size(1) == 1 ? 0 : t.stride(1), t.size(2) == 1 ? 0 : t.stride(2)};
}

// The kernels read the last dimension as contiguous.
inline torch::Tensor with_unit_last_stride(const torch::Tensor& t) {
  return t.stride(-1) == 1 ? t : t.contiguous();
}

}  // namespace inkstone
