// QKV depthwise residual convolution (Canon-B-like; Allen-Zhu 2025, Physics of LMs 4.1; docs/backbones.md,
// "QKV convolution"):
//   c′_t = c_t + Σ_{i<k} W[:, i] ⊙ c_{t−(k−1)+i},   c = [q | k | v] flat per token,
// depthwise, no bias, norm or activation, applied before RoPE (depthwise_conv.h: causal, centred when
// bidirectional, decode state in the KV cache). Zero taps make it the identity, i.e. exactly the base attention.
#pragma once
#include <array>
#include <cstdint>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "models/mixer_context.h"

namespace inkstone {

class QkvConvImpl : public torch::nn::Module {
 public:
  // widths: the flat widths of q, k and v; layer_index: the attention layer's slot in a KV cache.
  QkvConvImpl(std::array<int64_t, 3> widths, int64_t kernel, int64_t layer_index);
  // q, k, v: [B, T, width] each -> the same shapes.
  std::array<torch::Tensor, 3> forward(const std::array<torch::Tensor, 3>& qkv, const AttentionContext& context);

  torch::Tensor weight;  // [Σ widths, k]

 private:
  std::array<int64_t, 3> widths_;
  int64_t layer_index_;
};
TORCH_MODULE(QkvConv);

}  // namespace inkstone
