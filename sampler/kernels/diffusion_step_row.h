// One reverse step of discrete diffusion for one token position, fused (docs/kernels.md): from the model's logits
// over the vocabulary to the next token, without materialising x̂ or the posterior. The same code runs on the CPU
// (one position per call, serial lanes) and inside the CUDA kernel (one position per block, a block's threads as
// lanes): `Lanes` supplies the loop split and the reductions, `Uniforms` the counter-based draws.
//
// Per position, with logits l over the vocabulary and the support S (|S| = N) that x̂ ranges over:
//   1. x̂ = softmax(l / T) over S, after top-k, top-p and min-p on x̂ (filter_row.h; filters act on x̂, never on
//      the posterior).
//   2. The posterior q(v) up to its normaliser p_t(z) (the sampler's float64 reference and its derivation:
//      sampler/diffusion_posterior.h), for the noise levels α, μ, υ at t and s (objectives/noise_process.h):
//        q(v) ∝ (α_t/α_s [v = z] + γ_z) (α_s x̂_v + μ_s [v = m] + υ_s/N [v ∈ S]),
//        γ_z = (μ_t − α_t/α_s μ_s) [z = m] + (υ_t − α_t/α_s υ_s)/N [z ∈ S];
//      γ_z = 0 (nothing but z leads to z: an unmasked token under masked noise) keeps z.
//   3. The draw: argmax_v q(v) / E_v with E_v = −log U_v (an exponential race; ties to the smaller id).
#pragma once
#include <cmath>
#include <cstdint>

#include "sampler/kernels/filter_row.h"
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
  const FilterParams filter{p.temperature, p.top_k, p.top_p, p.min_p, p.support_size};
  const auto row = filter_row<Real>(logits, vocab, support, filter, lanes);

  // The posterior's weight of each id and the race.
  const Real mask_s = static_cast<Real>(p.mask_s), spread_s = static_cast<Real>(p.uniform_s) / n;
  double race = -1.0;
  int64_t winner = vocab;
  for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
    const bool is_mask = v == p.mask_id;
    if (!support[v] && !is_mask) continue;
    const float l = to_float(logits[v]);
    const Real x_hat = row.x_hat(v, l);
    const Real q = (v == z ? kept_share + gamma : gamma) * (a_s * x_hat + (is_mask ? mask_s : spread_s));
    if (!(q > 0)) continue;
    const Real score = q / exponential_from<Real>(uniforms.at(v));
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

}  // namespace inkstone::kernels
