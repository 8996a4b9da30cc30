// One reverse step of discrete diffusion for one token position, fused (docs/kernels.md): from the model's logits
// over the vocabulary to the next token, without materialising x̂ or the posterior. The same code runs on the CPU
// (one position per call, serial lanes) and inside the CUDA kernel (one position per block, a block's threads as
// lanes): `Lanes` supplies the loop split and the reductions, `Uniforms` the counter-based draws.
//
// Per position, with logits l over the vocabulary and the support S (|S| = N) that x̂ ranges over:
//   1. x̂ = softmax(l / T) over S, after top-k, top-p and min-p on x̂ (filters act on x̂, never on the posterior);
//      T = 0 makes x̂ the point mass on the first argmax.
//   2. The posterior q(v) up to its normaliser p_t(z) (the sampler's float64 reference and its derivation:
//      sampler/diffusion_posterior.h), for the noise levels α, μ, υ at t and s (objectives/noise_process.h):
//        q(v) ∝ (α_t/α_s [v = z] + γ_z) (α_s x̂_v + μ_s [v = m] + υ_s/N [v ∈ S]),
//        γ_z = (μ_t − α_t/α_s μ_s) [z = m] + (υ_t − α_t/α_s υ_s)/N [z ∈ S];
//      γ_z = 0 (nothing but z leads to z: an unmasked token under masked noise) keeps z.
//   3. The draw: argmax_v q(v) / E_v with E_v = −log U_v (an exponential race; ties to the smaller id).
// top-k and top-p become thresholds on the logit found by bisection over the 2^32 ordered float keys (32 passes of
// a count or a sum), so no sort and no per-row buffer; ties at a threshold are all kept.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/kernels/bf16_bits.h"
#include "sampler/kernels/philox.h"

namespace inkstone::kernels {

struct DiffusionRowParams {
  double temperature = 1.0;  // 0: x̂ is the point mass on the argmax
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off; keeps x̂_v >= min_p · max x̂
  double alpha_t = 1.0;      // α at t and at s < t
  double alpha_s = 1.0;
  double mask_t = 0.0;       // μ at t and s
  double mask_s = 0.0;
  double uniform_t = 0.0;    // υ at t and s
  double uniform_s = 0.0;
  int64_t mask_id = -1;      // −1: the tokenizer has none (then μ must be 0)
  int64_t support_size = 0;  // N
  uint64_t seed = 0;
  uint32_t step = 0;
  bool float32 = false;  // x̂, the posterior and the race in float instead of double
};

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

// exp and log in the posterior's precision (expf / logf: the float versions on the host and the device alike).
INKSTONE_HD inline float exp_in(float x) { return ::expf(x); }
INKSTONE_HD inline double exp_in(double x) { return ::exp(x); }
INKSTONE_HD inline float log_in(float x) { return ::logf(x); }
INKSTONE_HD inline double log_in(double x) { return ::log(x); }

// The step with x̂, the posterior and the race in `Real` (params.float32 picks float, else double); the
// reductions across lanes stay double.
template <typename Real, typename Logit, typename Lanes, typename Uniforms>
INKSTONE_HD int64_t diffusion_step_row_in(const Logit* logits, int64_t vocab, const bool* support, int64_t z,
                                          const DiffusionRowParams& p, Uniforms& uniforms, Lanes& lanes) {
  const Real n = static_cast<Real>(p.support_size);
  const Real a_t = static_cast<Real>(p.alpha_t), a_s = static_cast<Real>(p.alpha_s);
  const Real kept_share = a_t / a_s;
  const bool z_masked = z == p.mask_id;
  const Real gamma = z_masked ? static_cast<Real>(p.mask_t) - kept_share * static_cast<Real>(p.mask_s)
                              : (static_cast<Real>(p.uniform_t) - kept_share * static_cast<Real>(p.uniform_s)) / n;
  if (!(gamma > 0)) return z;  // settled
  const double no_value = -1.0e300;

  // The largest logit over the support and its first index.
  double best = no_value;
  int64_t best_index = vocab;
  for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
    const double l = to_float(logits[v]);
    if (support[v] && l > best) {
      best = l;
      best_index = v;
    }
  }
  lanes.argmax(best, best_index);
  const Real top = static_cast<Real>(best);
  const int64_t argmax = best_index;
  const bool greedy = p.temperature == 0;

  // Filters as one kept set: the support, logits at or above the top-k and top-p keys, and x̂ >= min_p · max x̂.
  const Real temperature = static_cast<Real>(p.temperature);
  auto weight = [&](float l) { return exp_in((static_cast<Real>(l) - top) / temperature); };
  uint32_t floor_key = 0;
  if (!greedy && p.top_k > 0 && p.top_k < p.support_size) {
    floor_key = largest_key_reaching(static_cast<double>(p.top_k), [&](uint32_t key) {
      double count = 0;
      for (int64_t v = lanes.first(); v < vocab; v += lanes.stride())
        count += support[v] && ordered_key(to_float(logits[v])) >= key ? 1.0 : 0.0;
      return lanes.sum(count);
    });
  }
  auto kept_mass = [&](uint32_t key) {
    Real mass = 0;
    for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
      const float l = to_float(logits[v]);
      if (support[v] && ordered_key(l) >= key) mass += weight(l);
    }
    return lanes.sum(static_cast<double>(mass));
  };
  if (!greedy && p.top_p < 1.0) {
    const double target = p.top_p * kept_mass(floor_key);
    const uint32_t top_p_key = largest_key_reaching(target, kept_mass);
    floor_key = top_p_key > floor_key ? top_p_key : floor_key;
  }
  const double min_logit = !greedy && p.min_p > 0 ? best + p.temperature * ::log(p.min_p) : no_value;
  auto kept = [&](int64_t v, float l) { return support[v] && ordered_key(l) >= floor_key && l >= min_logit; };
  Real normaliser = 1;
  if (!greedy) {
    Real mass = 0;
    for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
      const float l = to_float(logits[v]);
      if (kept(v, l)) mass += weight(l);
    }
    normaliser = static_cast<Real>(lanes.sum(static_cast<double>(mass)));
  }

  // The posterior's weight of each id and the race.
  const Real mask_s = static_cast<Real>(p.mask_s), spread_s = static_cast<Real>(p.uniform_s) / n;
  const Real one = 1, zero = 0;
  const Real largest_below_one =
      one - (sizeof(Real) == sizeof(float) ? Real(5.9604645e-8) : Real(1.1102230246251565e-16));
  double race = -1.0;
  int64_t winner = vocab;
  for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
    const bool is_mask = v == p.mask_id;
    if (!support[v] && !is_mask) continue;
    const float l = to_float(logits[v]);
    const Real x_hat = greedy ? (v == argmax ? one : zero) : (kept(v, l) ? weight(l) / normaliser : zero);
    const Real q = (v == z ? kept_share + gamma : gamma) * (a_s * x_hat + (is_mask ? mask_s : spread_s));
    if (!(q > 0)) continue;
    // A uniform within 2⁻²⁵ of 1 rounds to 1 in float, and −ln 1 = 0 would let its id win outright.
    Real u = static_cast<Real>(uniforms.at(v));
    if (!(u < one)) u = largest_below_one;
    const Real score = q / -log_in(u);
    if (score > race) {
      race = score;
      winner = v;
    }
  }
  lanes.argmax(race, winner);
  return winner;
}

template <typename Logit, typename Lanes, typename Uniforms>
INKSTONE_HD int64_t diffusion_step_row(const Logit* logits, int64_t vocab, const bool* support, int64_t z,
                                       const DiffusionRowParams& p, Uniforms& uniforms, Lanes& lanes) {
  return p.float32 ? diffusion_step_row_in<float>(logits, vocab, support, z, p, uniforms, lanes)
                   : diffusion_step_row_in<double>(logits, vocab, support, z, p, uniforms, lanes);
}

// The CPU's lanes: one thread walks the whole row, and a reduction is the value itself.
struct SerialLanes {
  int64_t first() const { return 0; }
  int64_t stride() const { return 1; }
  double sum(double value) const { return value; }
  void argmax(double&, int64_t&) const {}
};

// The CPU's uniforms: Philox blocks computed here, one per vocabulary pair; the serial walk asks for ids in order,
// so the block of the last pair is kept for its second id.
struct PhiloxUniforms {
  uint64_t seed, subsequence;
  uint32_t step;
  uint64_t pair = ~uint64_t{0};
  PhiloxBlock block{};
  double at(int64_t v) {
    const auto wanted = static_cast<uint64_t>(v) / 2;
    if (wanted != pair) {
      pair = wanted;
      block = philox4x32_10(seed, subsequence, step_offset(step, pair));
    }
    return v % 2 == 0 ? uniform_from_words(block.x, block.y) : uniform_from_words(block.z, block.w);
  }
};

}  // namespace inkstone::kernels
