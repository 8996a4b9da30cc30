// The sampling filter of one row of logits, shared by the fused diffusion step (diffusion_step_row.h) and the
// keyed token draw of AR decoding (token_draw_row.h), on the CPU and inside their CUDA kernels (docs/kernels.md):
//   x̂ = softmax(l / T) over the support S, after top-k, top-p and min-p; T = 0 makes x̂ the point mass on the
//   first argmax.
// top-k and top-p become thresholds on the logit found by bisection over the 2^32 ordered float keys (32 passes of
// a count or a sum), so no sort and no per-row buffer; ties at a threshold are all kept. The CPU walks a row
// serially (`SerialLanes`); a CUDA block splits it over its threads, and the reductions go through `Lanes`.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/kernels/bf16_bits.h"

namespace inkstone::kernels {

// Floats in the order of unsigned keys: a threshold search over keys is a search over values.
INKSTONE_HD inline uint32_t ordered_key(float value) {
  const uint32_t bits = float_to_bits(value);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The largest key K with measure(K) >= target, for a measure that falls as K rises (a count or mass of the
// values whose key is >= K). measure(0) >= target must hold.
template <typename Measure>
INKSTONE_HD uint32_t largest_key_reaching(double target, Measure measure) {
  uint64_t low = 0, high = 0xFFFFFFFFull;
  while (low < high) {
    const uint64_t middle = low + (high - low + 1) / 2;
    if (measure(static_cast<uint32_t>(middle)) >= target) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return static_cast<uint32_t>(low);
}

// exp and log in the row's precision (expf / logf: the float versions on the host and the device alike).
INKSTONE_HD inline float exp_in(float x) { return ::expf(x); }
INKSTONE_HD inline double exp_in(double x) { return ::exp(x); }
INKSTONE_HD inline float log_in(float x) { return ::logf(x); }
INKSTONE_HD inline double log_in(double x) { return ::log(x); }

struct FilterParams {
  double temperature = 1.0;  // 0: x̂ is the point mass on the argmax
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off; keeps x̂_v >= min_p · max x̂
  int64_t support_size = 0;  // |S|
};

// x̂ of one row, as the thresholds that define it: x̂_v = weight(l_v) / normaliser where kept(v, l_v), else 0.
// `support` null: every id is in S.
template <typename Real, typename Logit>
struct FilteredRow {
  const Logit* logits;
  const bool* support;
  double best;          // the largest logit over S
  int64_t argmax;       // its first id
  bool greedy;
  Real temperature;
  uint32_t floor_key;   // top-k and top-p: logits whose key is below it are dropped
  double min_logit;     // min-p: logits below it are dropped
  Real normaliser = 1;  // Σ weight over the kept ids (1 when greedy)

  INKSTONE_HD bool in_support(int64_t v) const { return support == nullptr || support[v]; }
  INKSTONE_HD Real weight(float l) const {
    return exp_in((static_cast<Real>(l) - static_cast<Real>(best)) / temperature);
  }
  INKSTONE_HD bool kept(int64_t v, float l) const {
    return in_support(v) && ordered_key(l) >= floor_key && l >= min_logit;
  }
  // x̂_v for a logit l = logits[v].
  INKSTONE_HD Real x_hat(int64_t v, float l) const {
    if (greedy) return v == argmax ? Real(1) : Real(0);
    return kept(v, l) ? weight(l) / normaliser : Real(0);
  }
};

// Finds the thresholds and the normaliser of one row: a max pass, the bisections the filters ask for, a sum.
template <typename Real, typename Logit, typename Lanes>
INKSTONE_HD FilteredRow<Real, Logit> filter_row(const Logit* logits, int64_t vocab, const bool* support,
                                                const FilterParams& p, Lanes& lanes) {
  const double no_value = -1.0e300;
  FilteredRow<Real, Logit> row{logits, support, no_value, vocab, p.temperature == 0,
                               static_cast<Real>(p.temperature), 0u, no_value};
  for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
    const double l = to_float(logits[v]);
    if (row.in_support(v) && l > row.best) {
      row.best = l;
      row.argmax = v;
    }
  }
  lanes.argmax(row.best, row.argmax);
  if (row.greedy) return row;

  if (p.top_k > 0 && p.top_k < p.support_size) {
    row.floor_key = largest_key_reaching(static_cast<double>(p.top_k), [&](uint32_t key) {
      double count = 0;
      for (int64_t v = lanes.first(); v < vocab; v += lanes.stride())
        count += row.in_support(v) && ordered_key(to_float(logits[v])) >= key ? 1.0 : 0.0;
      return lanes.sum(count);
    });
  }
  auto kept_mass = [&](uint32_t key) {
    Real mass = 0;
    for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
      const float l = to_float(logits[v]);
      if (row.in_support(v) && ordered_key(l) >= key) mass += row.weight(l);
    }
    return lanes.sum(static_cast<double>(mass));
  };
  if (p.top_p < 1.0) {
    const double target = p.top_p * kept_mass(row.floor_key);
    const uint32_t top_p_key = largest_key_reaching(target, kept_mass);
    row.floor_key = top_p_key > row.floor_key ? top_p_key : row.floor_key;
  }
  if (p.min_p > 0) row.min_logit = row.best + p.temperature * ::log(p.min_p);
  Real mass = 0;
  for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
    const float l = to_float(logits[v]);
    if (row.kept(v, l)) mass += row.weight(l);
  }
  row.normaliser = static_cast<Real>(lanes.sum(static_cast<double>(mass)));
  return row;
}

// −log U for the race argmax_v w_v / E_v (an exponential race: the winner is a draw from w / Σ w). A uniform
// within 2⁻²⁵ of 1 rounds to 1 in float, and −ln 1 = 0 would let its id win outright.
template <typename Real>
INKSTONE_HD Real exponential_from(double uniform) {
  const Real largest_below_one =
      Real(1) - (sizeof(Real) == sizeof(float) ? Real(5.9604645e-8) : Real(1.1102230246251565e-16));
  Real u = static_cast<Real>(uniform);
  if (!(u < Real(1))) u = largest_below_one;
  return -log_in(u);
}

// The CPU's lanes: one thread walks the whole row, and a reduction is the value itself.
struct SerialLanes {
  int64_t first() const { return 0; }
  int64_t stride() const { return 1; }
  double sum(double value) const { return value; }
  void argmax(double&, int64_t&) const {}
};

}  // namespace inkstone::kernels
