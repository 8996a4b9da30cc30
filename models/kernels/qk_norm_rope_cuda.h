// The fused QK-norm and rotary embedding kernels' launchers, declared without libtorch so that nvcc compiles the
// kernel file alone.
#pragma once
#include "models/kernels/qk_norm_rope_row.h"

namespace inkstone::kernels {

// One warp per row. Forward: y and the per-row r (float32 for float32 and bf16 rows, float64 for float64). Backward:
// dx and the weight gradient's per-chunk partials [gradient_chunks, h_d]; `stream` is a cudaStream_t.
#define INKSTONE_QK_NORM_ROPE_LAUNCHERS(T, Compute)                                                                \
  void launch_qk_norm_rope(const T* x, const Compute* g, const float* cos, const float* sin,                      \
                           const QkNormRopeShape& shape, T* y, Compute* r, void* stream);                          \
  void launch_qk_norm_rope_backward(const T* x, const T* dy, const Compute* g, const float* cos, const float* sin, \
                                    const Compute* r, const QkNormRopeShape& shape, T* dx, Compute* dg_partial,     \
                                    void* stream);
INKSTONE_QK_NORM_ROPE_LAUNCHERS(float, float)
INKSTONE_QK_NORM_ROPE_LAUNCHERS(Bf16Bits, float)
INKSTONE_QK_NORM_ROPE_LAUNCHERS(double, double)
#undef INKSTONE_QK_NORM_ROPE_LAUNCHERS

}  // namespace inkstone::kernels
