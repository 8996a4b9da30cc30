// The keyed draw of autoregressive decoding for one row of next-token logits (docs/kernels.md, "Keyed token
// draws"): the filter of filter_row.h, then the exponential race argmax_v w_v / E_v over the kept ids with
// E_v = −log U_v, U_v from the row's Philox stream. The stream is keyed by (seed, sequence, position), so a
// sequence draws the same token from the same logits in any batch, bucket or refill order and on either device.
// The same code runs on the CPU (one row per call) and inside the CUDA kernel (one row per block).
#pragma once
#include <cmath>
#include <cstdint>

#include "sampler/kernels/filter_row.h"

namespace inkstone::kernels {

struct TokenDraw {
  int64_t token;
  double log_prob;  // log x̂ of the token (0 when greedy: a point mass)
};

template <typename Logit, typename Lanes, typename Uniforms>
INKSTONE_HD TokenDraw token_draw_row(const Logit* logits, int64_t vocab, const FilterParams& p, Uniforms& uniforms,
                                     Lanes& lanes) {
  const auto row = filter_row<double>(logits, vocab, nullptr, p, lanes);
  // A row without one finite logit (a broken model's NaN) has no winner: token 0 with an undefined log-prob, never
  // an id past the vocabulary.
  const TokenDraw no_winner{0, ::nan("")};
  if (row.argmax == vocab) return no_winner;
  if (row.greedy) return {row.argmax, 0.0};
  // Σ w is common to every score, so the race runs on the unnormalised weights.
  double race = -1.0;
  int64_t winner = vocab;
  for (int64_t v = lanes.first(); v < vocab; v += lanes.stride()) {
    const float l = to_float(logits[v]);
    if (!row.kept(v, l)) continue;
    const double score = row.weight(l) / exponential_from<double>(uniforms.at(v));
    if (score > race) {
      race = score;
      winner = v;
    }
  }
  lanes.argmax(race, winner);
  if (winner == vocab) return no_winner;
  const double l = to_float(logits[winner]);
  return {winner, (l - row.best) / p.temperature - ::log(row.normaliser)};
}

}  // namespace inkstone::kernels
