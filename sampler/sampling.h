// From next-token logits to a sampling distribution and a draw: temperature, then top-k, then top-p (nucleus).
#pragma once
#include <cstdint>

#include <ATen/core/Generator.h>
#include <torch/types.h>

namespace inkstone {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
};

// Per row, logits outside the k largest become −inf (values tied with the k-th are kept).
torch::Tensor top_k_filter(const torch::Tensor& logits, int64_t k);

// Nucleus filter (Holtzman et al. 2020, eq. 2): per row, keeps the smallest set of most likely tokens whose
// probability mass is >= p; the others become −inf.
torch::Tensor top_p_filter(const torch::Tensor& logits, double p);

// Log-probabilities of the distribution tokens are drawn from: log_softmax(top_p(top_k(logits / temperature))),
// over the last dimension in fp32. Requires temperature > 0.
// InputError unless temperature is finite and >= 0, top_k >= 0 and top_p in (0, 1] (NaN included).
void check_sampling_params(const SamplingParams& params);

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingParams& params);

struct Draw {
  torch::Tensor tokens;     // [N] int64
  torch::Tensor log_probs;  // [N] fp32, of each drawn token under the sampling distribution
};

// One token per row of logits [N, V]. Temperature 0 takes the argmax, whose log-probability is 0 (a point mass).
Draw draw_tokens(const torch::Tensor& logits, const SamplingParams& params, at::Generator& generator);

}  // namespace inkstone
