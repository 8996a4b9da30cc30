#include "models/depthwise_conv.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor depthwise_conv_over_time(const torch::Tensor& x, const torch::Tensor& weight, int64_t layer,
                                       const AttentionContext& context) {
  const int64_t kernel = weight.size(1);
  const int64_t length = x.size(1);
  const auto input = context.token_real.defined() ? x * context.token_real.unsqueeze(-1).to(x.dtype()) : x;
  torch::Tensor padded;  // [B, k − 1 + T, C]
  if (context.mode == MaskMode::bidirectional) {
    TORCH_CHECK(context.cache == nullptr, "a centred convolution cannot decode incrementally");
    const int64_t before = (kernel - 1) / 2;
    padded = torch::constant_pad_nd(input, {0, 0, before, kernel - 1 - before});
  } else if (context.cache) {
    padded = context.cache->conv_window(layer, input, kernel - 1);
  } else {
    padded = torch::constant_pad_nd(input, {0, 0, kernel - 1, 0});
  }
  const auto w = weight.to(x.dtype());
  auto y = padded.slice(1, 0, length) * w.select(1, 0);
  for (int64_t i = 1; i < kernel; ++i) y = y + padded.slice(1, i, i + length) * w.select(1, i);
  return y;
}

}  // namespace inkstone
