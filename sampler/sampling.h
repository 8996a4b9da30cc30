// From next-token logits to a sampling distribution: temperature, then top-k, top-p (nucleus) and min-p. The
// draw itself is the keyed kernel's (sampler/kernels/token_draw.h); these composites are its reference and give
// the trainer the same distribution's log-probs.
#pragma once
#include <cstdint>

#include <ATen/core/Generator.h>
#include <torch/types.h>

namespace inkstone {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off; keeps tokens at least min_p times as likely as the most likely one
};

// Per row, logits outside the k largest become −inf (values tied with the k-th are kept).
torch::Tensor top_k_filter(const torch::Tensor& logits, int64_t k);

// Nucleus filter (Holtzman et al. 2020, eq. 2): per row, keeps the smallest set of most likely tokens whose
// probability mass is >= p; the others become −inf.
torch::Tensor top_p_filter(const torch::Tensor& logits, double p);

// min-p (Nguyen et al. 2024): per row, logits more than −log(p) below the largest become −inf (on logits already
// divided by the temperature: x̂_v >= p · max x̂).
torch::Tensor min_p_filter(const torch::Tensor& logits, double p);

// InputError unless temperature is finite and >= 0, top_k >= 0, top_p in (0, 1] and min_p in [0, 1] (NaN
// included).
void check_sampling_params(const SamplingParams& params);

// Log-probabilities of the distribution tokens are drawn from: log_softmax of the kept logits / temperature, over
// the last dimension in fp32. Requires temperature > 0.

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingParams& params);

}  // namespace inkstone
