#include "models/time_embedding.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor sinusoidal_embedding(const torch::Tensor& sigma, int64_t dim, double max_period) {
  const int64_t half = dim / 2;
  const auto i = torch::arange(half, sigma.options().dtype(torch::kFloat));
  const auto omega = torch::exp(-std::log(max_period) * i / static_cast<double>(half));
  const auto args = sigma.to(torch::kFloat).unsqueeze(1) * omega.unsqueeze(0);
  return torch::cat({args.cos(), args.sin()}, -1);
}

TimeEmbeddingImpl::TimeEmbeddingImpl(int64_t cond_dim) {
  in_proj = register_module("in_proj", torch::nn::Linear(kFrequencyDim, cond_dim));
  out_proj = register_module("out_proj", torch::nn::Linear(cond_dim, cond_dim));
}

torch::Tensor TimeEmbeddingImpl::forward(const torch::Tensor& sigma) {
  // The sinusoids are formed in float32 and enter in the weights' dtype (bf16 under run.param_dtype = bf16).
  const auto emb = sinusoidal_embedding(sigma, kFrequencyDim, kMaxPeriod).to(in_proj->weight.scalar_type());
  return torch::silu(out_proj(torch::silu(in_proj(emb))));
}

}  // namespace inkstone
