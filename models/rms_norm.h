// RMSNorm (Zhang & Sennrich 2019, eq. 4): y = x · (mean(x²) + ε)^(−1/2) · g, no bias.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace inkstone {

// Normalises over the last dimension: where x and the weight share a dtype (float32, bf16 or float64), one fused
// pass per row and direction on the CPU or a CUDA GPU (models/kernels/rms_norm_row.h; the ATen composite is about
// 14 elementwise passes over the activations with autograd, and casts bf16 up and back); else (mixed dtypes under
// autocast) the composite in fp32.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The residual add and the next sublayer's norm in one pass per row and direction (docs/kernels.md, "The residual
// add fused with RMSNorm"): sum = x + branch and normed = rms_norm(sum), the values of the two ops run one after the
// other. Fused under rms_norm's conditions with x and branch of one shape, dtype and device; else those two ops.
struct ResidualSumAndNorm {
  torch::Tensor sum;
  torch::Tensor normed;
};
ResidualSumAndNorm add_rms_norm(const torch::Tensor& x, const torch::Tensor& branch, const torch::Tensor& weight,
                                double eps);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  // Normalises over the last dimension in fp32 (bf16 loses the mean of squares) and returns x's dtype.
  torch::Tensor forward(const torch::Tensor& x);
  double eps() const { return eps_; }

  torch::Tensor weight;  // g, starts at 1

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

}  // namespace inkstone
