// The QK-norm and the rotary embedding of one attention head's row (Qwen3's per-head RMSNorm before RoPE;
// docs/kernels.md "The fused QK-norm and rotary embedding"), code that the CUDA kernel and its CPU twin both run.
// For a row x of width D = h_d, gain g and the rotation R of models/kernels/rope_row.h:
//   forward   r = (Σ_j x_j² / D + ε)^(−1/2),   z = x r ⊙ g,   y = R z
//   backward  dz = Rᵀ dy,   dg = Σ_rows dz ⊙ x r,   dn = dz ⊙ g,
//             dx = r dn − x r³ ⟨dn, x⟩ / D            (Zhang & Sennrich 2019, the RMSNorm gradient)
// The row's work is split over `lanes` workers, lane l taking the coordinate pairs (j, j + h_d/2) with j ≡ l mod
// lanes: a warp's threads on the GPU, one worker on the CPU. The two row sums (Σ x², ⟨dn, x⟩) are formed per lane
// and added up by the caller. float32 and bf16 rows are computed in float32 and rounded once at the store, float64
// rows in float64.
#pragma once
#include <cstdint>

#include "models/kernels/rms_norm_row.h"
#include "models/kernels/rope_row.h"

namespace inkstone::kernels {

// The widest head the kernels take: the GPU backward keeps a chunk's weight gradient in shared memory.
constexpr int64_t kQkNormRopeMaxWidth = 512;

struct QkNormRopeShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t time = 0;
  int64_t half = 0;  // h_d / 2
  RopeStrides x, grad, out, grad_x;  // of [B, H, T, h_d] views whose last dimension is contiguous
  RopeStrides table;                 // of the [B or 1, 1, T, h_d] tables (head stride 0)
  double eps = 0;
  INKSTONE_HD int64_t rows() const { return batch * heads * time; }
  INKSTONE_HD int64_t width() const { return 2 * half; }
};

// Row `row` in (batch, time, head) order, heads fastest: neighbouring rows of a [B, T, H, h_d] projection are
// neighbours in memory.
struct RowPlace {
  int64_t b, h, t;
};
INKSTONE_HD inline RowPlace place_of(const QkNormRopeShape& shape, int64_t row) {
  return {row / (shape.heads * shape.time), row % shape.heads, (row / shape.heads) % shape.time};
}
INKSTONE_HD inline int64_t offset(const RopeStrides& strides, const RowPlace& p) {
  return p.b * strides.batch + p.h * strides.head + p.t * strides.time;
}

// This lane's part of Σ_j x_j².
template <typename T>
INKSTONE_HD auto sum_of_squares_part(const T* x, const QkNormRopeShape& shape, int64_t lane, int64_t lanes) {
  decltype(load(x[0])) sum = 0;
  for (int64_t j = lane; j < shape.width(); j += lanes) {
    const auto value = load(x[j]);
    sum += value * value;
  }
  return sum;
}

// y = R (x r ⊙ g) for this lane's pairs; g, cos, sin in the compute precision's table type (g) and float32.
template <typename T, typename Compute>
INKSTONE_HD void norm_rope_pairs(const T* x, const Compute* g, const float* cos, const float* sin, Compute r,
                                 const QkNormRopeShape& shape, int64_t lane, int64_t lanes, T* y) {
  const int64_t h = shape.half;
  for (int64_t j = lane; j < h; j += lanes) {
    const Compute a = load(x[j]) * r * g[j], b = load(x[j + h]) * r * g[j + h];
    store(y + j, product_sum(a, static_cast<Compute>(cos[j]), b, static_cast<Compute>(sin[j])));
    store(y + j + h, product_sum(b, static_cast<Compute>(cos[j + h]), a, static_cast<Compute>(sin[j + h])));
  }
}

// dz = Rᵀ dy at pair j: (dz_j, dz_{j+h}).
template <typename T, typename Compute>
INKSTONE_HD void unrotated_pair(const T* dy, const float* cos, const float* sin, int64_t j, int64_t h, Compute* first,
                                Compute* second) {
  const Compute da = load(dy[j]), db = load(dy[j + h]);
  *first = product_sum(da, static_cast<Compute>(cos[j]), db, static_cast<Compute>(sin[j + h]));
  *second = product_sum(db, static_cast<Compute>(cos[j + h]), da, static_cast<Compute>(sin[j]));
}

// This lane's part of ⟨dn, x⟩ with dn = Rᵀ dy ⊙ g.
template <typename T, typename Compute>
INKSTONE_HD Compute gradient_dot_part(const T* x, const T* dy, const Compute* g, const float* cos, const float* sin,
                                      const QkNormRopeShape& shape, int64_t lane, int64_t lanes) {
  const int64_t h = shape.half;
  Compute sum = 0;
  for (int64_t j = lane; j < h; j += lanes) {
    Compute first, second;
    unrotated_pair(dy, cos, sin, j, h, &first, &second);
    sum += first * g[j] * load(x[j]) + second * g[j + h] * load(x[j + h]);
  }
  return sum;
}

// dx for this lane's pairs, and dz ⊙ x r added into dg (indexed by coordinate; a lane touches only its own).
template <typename T, typename Compute>
INKSTONE_HD void norm_rope_gradient_pairs(const T* x, const T* dy, const Compute* g, const float* cos,
                                          const float* sin, Compute r, Compute dot, const QkNormRopeShape& shape,
                                          int64_t lane, int64_t lanes, T* dx, Compute* dg) {
  const int64_t h = shape.half;
  const Compute coefficient = dot * r * r * r / static_cast<Compute>(shape.width());
  for (int64_t j = lane; j < h; j += lanes) {
    Compute first, second;
    unrotated_pair(dy, cos, sin, j, h, &first, &second);
    const Compute a = load(x[j]), b = load(x[j + h]);
    store(dx + j, r * first * g[j] - a * coefficient);
    store(dx + j + h, r * second * g[j + h] - b * coefficient);
    dg[j] += first * a * r;
    dg[j + h] += second * b * r;
  }
}

// The weight gradient is summed in fixed chunks of consecutive rows, each chunk's partial on its own (one warp on
// the GPU), so the result depends on neither the thread count nor the device's scheduling.
INKSTONE_HD inline int64_t gradient_chunks(const QkNormRopeShape& shape) {
  return shape.rows() < 1024 ? shape.rows() : 1024;
}
INKSTONE_HD inline int64_t rows_per_chunk(const QkNormRopeShape& shape) {
  const int64_t chunks = gradient_chunks(shape);
  return chunks == 0 ? 0 : (shape.rows() + chunks - 1) / chunks;
}

}  // namespace inkstone::kernels
