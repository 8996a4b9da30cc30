// The rotary embedding of one coordinate pair (docs/rope.md, docs/kernels.md "The fused rotary embedding"), code that
// the CUDA kernel and its CPU twin both run. With the full-width tables of models/rope.h (cos = (cos mω, cos mω),
// sin = (−sin mω, sin mω)) the pair (a, b) = (x_j, x_{j+h}), h = h_d/2, maps to
//   forward R:    (a cos_j + b sin_j,      b cos_{j+h} + a sin_{j+h}),
//   backward Rᵀ:  (a cos_j + b sin_{j+h},  b cos_{j+h} + a sin_j),
// the transpose being the gradient (R is linear in x; the tables carry no gradient). Each product is rounded before
// the sum, as the composite x ⊙ cos + swap(x) ⊙ sin rounds, so the twin equals it bit for bit in float32 and bf16.
#pragma once
#include <cstdint>

#include "core/kernels/bf16_bits.h"

namespace inkstone::kernels {

// Element strides of a [B, H, T, h_d] tensor whose last dimension is contiguous; 0 where a table is broadcast.
struct RopeStrides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t time = 0;
};

struct RopeShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t time = 0;
  int64_t half = 0;  // h_d / 2
  RopeStrides x, out, table;
  bool transpose = false;  // apply Rᵀ (the backward) instead of R
  INKSTONE_HD int64_t rows() const { return batch * heads * time; }
};

// p q + r s with both products rounded (no fused multiply-add, which nvcc would otherwise contract to).
INKSTONE_HD inline float product_sum(float p, float q, float r, float s) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(p, q), __fmul_rn(r, s));
#else
  return p * q + r * s;
#endif
}
INKSTONE_HD inline double product_sum(double p, double q, double r, double s) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(__dmul_rn(p, q), __dmul_rn(r, s));
#else
  return p * q + r * s;
#endif
}

// Pair j of row `row` (= (b H + h) T + t) of x into out.
template <typename T>
INKSTONE_HD void rope_pair(const T* x, const float* cos, const float* sin, const RopeShape& shape, int64_t row,
                           int64_t j, T* out) {
  const int64_t t = row % shape.time;
  const int64_t h = (row / shape.time) % shape.heads;
  const int64_t b = row / (shape.time * shape.heads);
  const T* in = x + b * shape.x.batch + h * shape.x.head + t * shape.x.time;
  T* to = out + b * shape.out.batch + h * shape.out.head + t * shape.out.time;
  const int64_t at = b * shape.table.batch + t * shape.table.time;
  using Compute = decltype(load(in[0]));
  const Compute first = load(in[j]), second = load(in[j + shape.half]);
  const Compute cos_first = cos[at + j], cos_second = cos[at + j + shape.half];
  const Compute sin_first = sin[at + j], sin_second = sin[at + j + shape.half];
  store(to + j, product_sum(first, cos_first, second, shape.transpose ? sin_second : sin_first));
  store(to + j + shape.half, product_sum(second, cos_second, first, shape.transpose ? sin_first : sin_second));
}

}  // namespace inkstone::kernels
