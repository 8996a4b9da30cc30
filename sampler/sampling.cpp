#include "sampler/sampling.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"

namespace inkstone {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

}  // namespace

void check_sampling_params(const SamplingParams& s) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    throw InputError(fmt::format("sample.temperature = {} must be a finite number >= 0", s.temperature));
  if (s.top_k < 0) throw InputError(fmt::format("sample.top_k = {} must be >= 0", s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1)) throw InputError(fmt::format("sample.top_p = {} must be in (0, 1]", s.top_p));
  if (!(s.min_p >= 0 && s.min_p <= 1)) throw InputError(fmt::format("sample.min_p = {} must be in [0, 1]", s.min_p));
}

torch::Tensor top_k_filter(const torch::Tensor& logits, int64_t k) {
  if (k <= 0 || k >= logits.size(-1)) return logits;
  const auto kth_largest = std::get<0>(logits.topk(k, -1)).narrow(-1, k - 1, 1);
  return logits.masked_fill(logits < kth_largest, kMinusInf);
}

torch::Tensor top_p_filter(const torch::Tensor& logits, double p) {
  TORCH_CHECK(p > 0, "top_p must be > 0, got ", p);
  if (p >= 1.0) return logits;
  const auto [sorted, order] = logits.sort(-1, /*descending=*/true);
  const auto probs = sorted.softmax(-1);
  // A token is dropped when the more likely tokens before it already reach mass p; the first always stays.
  const auto mass_before = probs.cumsum(-1) - probs;
  const auto drop_sorted = mass_before >= p;
  const auto drop = torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
  return logits.masked_fill(drop, kMinusInf);
}

torch::Tensor min_p_filter(const torch::Tensor& logits, double p) {
  if (p <= 0) return logits;
  const auto floor = std::get<0>(logits.max(-1, /*keepdim=*/true)) + std::log(p);
  return logits.masked_fill(logits < floor, kMinusInf);
}

torch::Tensor sampling_log_probs(const torch::Tensor& logits, const SamplingParams& params) {
  TORCH_CHECK(params.temperature > 0, "sampling_log_probs needs temperature > 0");
  auto scaled = logits.to(torch::kFloat) / params.temperature;
  return min_p_filter(top_p_filter(top_k_filter(scaled, params.top_k), params.top_p), params.min_p).log_softmax(-1);
}

}  // namespace inkstone
