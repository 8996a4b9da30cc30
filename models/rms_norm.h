// RMSNorm (Zhang & Sennrich 2019, eq. 4): y = x · (mean(x²) + ε)^(−1/2) · g, no bias.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace inkstone {

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
