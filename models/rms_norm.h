// RMSNorm (Zhang & Sennrich 2019, eq. 4): y = x · (mean(x²) + ε)^(−1/2) · g, no bias.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace inkstone {

// Normalises over the last dimension. On CPU in fp32 / fp64 one fused pass per row and direction (the ATen
// composite is about 14 elementwise passes over the activations with autograd); elsewhere the composite in fp32.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  // Normalises over the last dimension in fp32 (bf16 loses the mean of squares) and returns x's dtype.
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // g, starts at 1

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

}  // namespace inkstone
