// RMSNorm's CUDA launchers (models/kernels/rms_norm_row.h), declared without libtorch so that nvcc compiles the
// kernel file alone.
#pragma once
#include "models/kernels/rms_norm_row.h"

namespace inkstone::kernels {

// The weight gradient is summed in this many chunks of consecutive rows (fewer where there are fewer rows), one
// thread block each, one partial row each.
constexpr int64_t kRmsNormGradientChunksOnGpu = 1024;

// Forward: y and r per row (Compute: float for float32 and bf16 rows, double for float64); with a residual branch o
// (else null) the rows normalised are h = x + o, written to h. Backward: dx (plus the stream's gradient dh where not
// null) and the per-chunk weight-gradient partials [chunks, D], zeroed by the caller; x is the row normalised (h
// where fused). `stream` is a cudaStream_t.
#define INKSTONE_RMS_NORM_LAUNCHERS(T, Compute)                                                                   \
  void launch_rms_norm(const T* x, const T* o, T* h, const T* g, const RmsNormShape& shape, T* y, Compute* r,     \
                       void* stream);                                                                             \
  void launch_rms_norm_backward(const T* x, const T* dy, const T* g, const Compute* r, const T* dh,               \
                                const RmsNormShape& shape, T* dx, Compute* dg_partial, void* stream);
INKSTONE_RMS_NORM_LAUNCHERS(float, float)
INKSTONE_RMS_NORM_LAUNCHERS(Bf16Bits, float)
INKSTONE_RMS_NORM_LAUNCHERS(double, double)
#undef INKSTONE_RMS_NORM_LAUNCHERS

}  // namespace inkstone::kernels
