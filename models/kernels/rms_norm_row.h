// RMSNorm of one row (Zhang & Sennrich 2019, eq. 4; docs/kernels.md "RMSNorm on the GPU"), the per-coordinate code
// that the CUDA kernel and the CPU op (models/rms_norm.cpp) both run. For a row x of width D and gain g:
//   forward   r = (Σ_j x_j² / D + ε)^(−1/2),   y = x r ⊙ g
//   backward  dx = r (dy ⊙ g) − x r³ ⟨dy ⊙ g, x⟩ / D,   dg = Σ_rows dy ⊙ x r
// Fused with the residual add before it (docs/kernels.md, "The residual add fused with RMSNorm"), the row
// normalised is h = x + o, stored rounded to the row type and read back rounded, so y is RMSNorm(h) exactly as if
// the add ran alone; h feeds both the rest of the stream and the norm, so its gradient is the stream's dh plus the
// norm's dx:
//   dx = do = dh + r (dy ⊙ g) − h r³ ⟨dy ⊙ g, h⟩ / D.
// The row sums Σ x² and ⟨dy ⊙ g, x⟩ are formed by each side its own way (a block's tree on the GPU, eight running
// sums on the CPU), so the two agree to rounding, not bit for bit. float32 and bf16 rows are computed in float32
// and rounded once at the store; float64 rows in float64.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/kernels/bf16_bits.h"

namespace inkstone::kernels {

struct RmsNormShape {
  int64_t rows = 0;
  int64_t width = 0;  // D
  double eps = 0;
};

INKSTONE_HD inline float square_root(float value) {
#ifdef __CUDA_ARCH__
  return sqrtf(value);
#else
  return std::sqrt(value);
#endif
}
INKSTONE_HD inline double square_root(double value) {
#ifdef __CUDA_ARCH__
  return ::sqrt(value);
#else
  return std::sqrt(value);
#endif
}

// r = (Σ x² / D + ε)^(−1/2) in the precision of the sum: double for RMSNorm's rows, the rows' compute precision
// for the QK-norm of qk_norm_rope_row.h.
template <typename Compute>
INKSTONE_HD Compute inverse_rms(Compute sum_of_squares, int64_t width, double eps) {
  return Compute(1) / square_root(sum_of_squares / static_cast<Compute>(width) + static_cast<Compute>(eps));
}

template <typename T>
INKSTONE_HD auto square_of(const T* x, int64_t j) {
  const auto value = load(x[j]);
  return value * value;
}

// The weight gradient's summand and the row dot product's summand at coordinate j.
template <typename T>
INKSTONE_HD auto gain_gradient_term(const T* x, const T* dy, decltype(load(T{})) r, int64_t j) {
  return load(dy[j]) * load(x[j]) * r;
}
template <typename T>
INKSTONE_HD auto gradient_dot_term(const T* x, const T* dy, const T* g, int64_t j) {
  return load(dy[j]) * load(g[j]) * load(x[j]);
}

// h_j = x_j + o_j, the fused residual add.
template <typename T>
INKSTONE_HD void residual_sum_at(const T* x, const T* o, int64_t j, T* h) {
  store(h + j, load(x[j]) + load(o[j]));
}

template <typename T>
INKSTONE_HD void normalise_at(const T* x, const T* g, decltype(load(T{})) r, int64_t j, T* y) {
  store(y + j, load(x[j]) * r * load(g[j]));
}

// dx_j given r and coefficient = ⟨dy ⊙ g, x⟩ r³ / D, plus the stream's gradient dh_j where the norm is fused
// with the residual add (dh null otherwise). The norm's part is rounded to the row type before dh is added, as
// autograd adds the two when the add and the norm run apart, so a fused and an unfused model train alike to the
// bit (data-parallel ZeRO stages, which run branches as their own nodes, unfused, match DDP).
template <typename T>
INKSTONE_HD void input_gradient_at(const T* x, const T* dy, const T* g, decltype(load(T{})) r,
                                   decltype(load(T{})) coefficient, const T* dh, int64_t j, T* dx) {
  store(dx + j, r * (load(dy[j]) * load(g[j])) - load(x[j]) * coefficient);
  if (dh) store(dx + j, load(dh[j]) + load(dx[j]));
}

}  // namespace inkstone::kernels
