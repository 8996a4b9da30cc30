// The SwiGLU product of one coordinate (Shazeer 2020, eq. 6; docs/kernels.md "The fused SwiGLU"), code that the CUDA
// kernel and its CPU twin both run. With the gate and up projections side by side in one row [g | u] of width 2F:
//   forward   h = SiLU(g) u = g σ(g) u,                     σ(g) = 1 / (1 + e^(−g))
//   backward  ∂h/∂u = g σ(g),  ∂h/∂g = u σ(g) (1 + g (1 − σ(g)))      (d/dg [g σ(g)] = σ(g) + g σ(g)(1 − σ(g)))
// so the backward reads only [g | u] and the incoming gradient: nothing but the projections' output is kept.
// float32 and bf16 are computed in float32 and rounded once at the store; float64 in float64.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/kernels/bf16_bits.h"

namespace inkstone::kernels {

struct SwigluShape {
  int64_t rows = 0;
  int64_t width = 0;  // F: the hidden width; a gate_up row holds 2F values
  INKSTONE_HD int64_t elements() const { return rows * width; }
};

INKSTONE_HD inline float logistic(float g) {
#ifdef __CUDA_ARCH__
  return 1.0f / (1.0f + expf(-g));
#else
  return 1.0f / (1.0f + std::exp(-g));
#endif
}
INKSTONE_HD inline double logistic(double g) { return 1.0 / (1.0 + exp(-g)); }

// Coordinate i (= row F + j) of the hidden activation h from gate_up.
template <typename T>
INKSTONE_HD void swiglu_forward_at(const T* gate_up, const SwigluShape& shape, int64_t i, T* hidden) {
  const int64_t row = i / shape.width, j = i % shape.width;
  const T* at = gate_up + row * 2 * shape.width;
  const auto g = load(at[j]), u = load(at[shape.width + j]);
  store(hidden + i, g * logistic(g) * u);
}

// Coordinate i of the gradient: both halves of d gate_up from d h.
template <typename T>
INKSTONE_HD void swiglu_backward_at(const T* gate_up, const T* grad_hidden, const SwigluShape& shape, int64_t i,
                                    T* grad_gate_up) {
  const int64_t row = i / shape.width, j = i % shape.width;
  const T* at = gate_up + row * 2 * shape.width;
  T* into = grad_gate_up + row * 2 * shape.width;
  const auto g = load(at[j]), u = load(at[shape.width + j]), dh = load(grad_hidden[i]);
  const auto s = logistic(g);
  using Compute = decltype(g);
  store(into + j, dh * u * s * (Compute(1) + g * (Compute(1) - s)));
  store(into + shape.width + j, dh * g * s);
}

}  // namespace inkstone::kernels
