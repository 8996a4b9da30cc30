// Noise-level conditioning vector for adaLN-Zero (DiT's TimestepEmbedder; docs/backbones.md,
// "adaLN-Zero time conditioning"):
//   c = SiLU(W₂ SiLU(W₁ emb(σ) + b₁) + b₂),  emb(σ) = [cos(σ ω_i) ‖ sin(σ ω_i)],  ω_i = P^(−i/half), i < half,
// with a 256-dim emb and max period P = 10⁴.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace inkstone {

// sigma: [B] float -> [B, dim] fp32.
torch::Tensor sinusoidal_embedding(const torch::Tensor& sigma, int64_t dim, double max_period);

class TimeEmbeddingImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kFrequencyDim = 256;
  static constexpr double kMaxPeriod = 1e4;

  explicit TimeEmbeddingImpl(int64_t cond_dim);
  // sigma: [B] -> c: [B, cond_dim]
  torch::Tensor forward(const torch::Tensor& sigma);

  torch::nn::Linear in_proj{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(TimeEmbedding);

}  // namespace inkstone
