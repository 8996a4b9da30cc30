// The MHAR / AttnRes routing read (models/residual_routing.h, route_sources) for one token position, forward and
// backward, fused (docs/kernels.md): the sources are read where they are (an array of S pointers to [B T, d]
// tensors, no stacked copy), no key or product tensors exist, and only the depth weights [S, H] and the sources'
// inverse RMS [S] are kept for the backward. The same code runs on the CPU (the twin the tests pin to the
// composite) and in the CUDA kernel (one block per position, its threads as lanes over the width).
//
// With sources s_i (i < S) of width d, a = q ∘ g (pseudo-query times key-norm gain), r_i = (Σ_j s_ij² / d + ε)^(-1/2)
// and head h owning the contiguous slice J_h of d / H coordinates:
//   forward   ℓ_ih = r_i Σ_{j∈J_h} a_j s_ij,   w_ih = softmax_i ℓ_ih,   y_j = Σ_i w_{i,h(j)} s_ij
//   backward  c_ih = Σ_{j∈J_h} dy_j s_ij,  dℓ_ih = w_ih (c_ih − Σ_k w_kh c_kh),  e_i = Σ_h dℓ_ih ℓ_ih
//             ds_ij = w_{i,h(j)} dy_j + dℓ_{i,h(j)} a_j r_i − s_ij r_i² e_i / d
//             dq_j = Σ_positions Σ_i dℓ_{i,h(j)} g_j s_ij r_i,   dg_j likewise with q_j
#pragma once
#include <cmath>
#include <cstdint>

#include "core/kernels/host_device.h"

namespace inkstone::kernels {

struct RouteShape {
  int64_t sources = 0;  // S
  int64_t width = 0;    // d
  int64_t heads = 1;    // H, dividing d
  int64_t positions = 0;  // B T: position p of source i starts at sources[i] + p width
  double eps = 1e-6;
};

// Per-position scratch the caller provides: on the CPU a small buffer, on the GPU shared memory.
struct RouteScratch {
  double* logits;   // [S H]
  double* weights;  // [S H]
  double* other;    // [S H]: c in the backward
  double* per_source;  // [S]: e in the backward
};

template <typename T, typename Lanes>
INKSTONE_HD void route_logits(const T* const* sources, const T* query, const T* gain, const RouteShape& shape,
                              int64_t position, const double* inv_rms, double* logits, Lanes& lanes) {
  const int64_t S = shape.sources, d = shape.width, H = shape.heads, slice = d / H;
  for (int64_t k = lanes.first(); k < S * H; k += lanes.stride()) logits[k] = 0;
  lanes.barrier();
  for (int64_t i = 0; i < S; ++i) {
    const T* s = sources[i] + position * d;
    for (int64_t j = lanes.first(); j < d; j += lanes.stride())
      lanes.accumulate(logits, i * H + j / slice, static_cast<double>(query[j]) * gain[j] * s[j] * inv_rms[i]);
  }
  lanes.barrier();
}

// Forward of one position: writes y [d], the depth weights [S, H] and inverse RMS [S] the backward reads.
template <typename T, typename Lanes>
INKSTONE_HD void route_forward_row(const T* const* sources, const T* query, const T* gain, const RouteShape& shape,
                                   int64_t position, T* out, double* weights_out, double* inv_rms_out,
                                   RouteScratch scratch, Lanes& lanes) {
  const int64_t S = shape.sources, d = shape.width, H = shape.heads, slice = d / H;
  for (int64_t i = 0; i < S; ++i) {
    const T* s = sources[i] + position * d;
    double squares = 0;
    for (int64_t j = lanes.first(); j < d; j += lanes.stride()) squares += static_cast<double>(s[j]) * s[j];
    const double total = lanes.sum(squares);
    if (lanes.first() == 0) inv_rms_out[i] = 1.0 / ::sqrt(total / d + shape.eps);
  }
  lanes.barrier();
  route_logits(sources, query, gain, shape, position, inv_rms_out, scratch.logits, lanes);
  for (int64_t h = lanes.first(); h < H; h += lanes.stride()) {  // softmax over depth, per head
    double top = scratch.logits[h];
    for (int64_t i = 1; i < S; ++i) top = scratch.logits[i * H + h] > top ? scratch.logits[i * H + h] : top;
    double normaliser = 0;
    for (int64_t i = 0; i < S; ++i) normaliser += ::exp(scratch.logits[i * H + h] - top);
    for (int64_t i = 0; i < S; ++i) weights_out[i * H + h] = ::exp(scratch.logits[i * H + h] - top) / normaliser;
  }
  lanes.barrier();
  for (int64_t j = lanes.first(); j < d; j += lanes.stride()) {
    double y = 0;
    for (int64_t i = 0; i < S; ++i) y += weights_out[i * H + j / slice] * sources[i][position * d + j];
    out[j] = static_cast<T>(y);
  }
}

// Backward of one position: writes d sources for this position and adds its share of dq and dg (through
// lanes.accumulate, so a GPU's blocks may share them).
template <typename T, typename Lanes>
INKSTONE_HD void route_backward_row(const T* const* sources, const T* query, const T* gain, const T* grad_out,
                                    const RouteShape& shape, int64_t position, const double* weights,
                                    const double* inv_rms, T* const* grad_sources, double* grad_query, double* grad_gain,
                                    RouteScratch scratch, Lanes& lanes) {
  const int64_t S = shape.sources, d = shape.width, H = shape.heads, slice = d / H;
  const T* dy = grad_out + position * d;
  route_logits(sources, query, gain, shape, position, inv_rms, scratch.logits, lanes);
  for (int64_t k = lanes.first(); k < S * H; k += lanes.stride()) scratch.other[k] = 0;
  lanes.barrier();
  for (int64_t i = 0; i < S; ++i) {
    const T* s = sources[i] + position * d;
    for (int64_t j = lanes.first(); j < d; j += lanes.stride())
      lanes.accumulate(scratch.other, i * H + j / slice, static_cast<double>(dy[j]) * s[j]);
  }
  lanes.barrier();
  double* dlogits = scratch.weights;  // reused: dℓ
  for (int64_t h = lanes.first(); h < H; h += lanes.stride()) {
    double mean = 0;
    for (int64_t i = 0; i < S; ++i) mean += weights[i * H + h] * scratch.other[i * H + h];
    for (int64_t i = 0; i < S; ++i) dlogits[i * H + h] = weights[i * H + h] * (scratch.other[i * H + h] - mean);
  }
  lanes.barrier();
  for (int64_t i = lanes.first(); i < S; i += lanes.stride()) {
    double e = 0;
    for (int64_t h = 0; h < H; ++h) e += dlogits[i * H + h] * scratch.logits[i * H + h];
    scratch.per_source[i] = e;
  }
  lanes.barrier();
  for (int64_t j = lanes.first(); j < d; j += lanes.stride()) {
    const int64_t h = j / slice;
    double dq = 0, dg = 0;
    for (int64_t i = 0; i < S; ++i) {
      const int64_t at = position * d + j;
      const double s = sources[i][at], r = inv_rms[i], dl = dlogits[i * H + h];
      grad_sources[i][at] = static_cast<T>(weights[i * H + h] * dy[j] + dl * query[j] * gain[j] * r -
                                        s * r * r * scratch.per_source[i] / d);
      dq += dl * gain[j] * s * r;
      dg += dl * query[j] * s * r;
    }
    lanes.accumulate(grad_query, j, dq);
    lanes.accumulate(grad_gain, j, dg);
  }
  lanes.barrier();
}

// The CPU's lanes for these rows: one thread, accumulation a plain add.
struct SerialRouteLanes {
  int64_t first() const { return 0; }
  int64_t stride() const { return 1; }
  double sum(double value) const { return value; }
  void accumulate(double* into, int64_t index, double value) const { into[index] += value; }
  void barrier() const {}
};

}  // namespace inkstone::kernels
