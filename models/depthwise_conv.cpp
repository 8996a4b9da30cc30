#include "models/depthwise_conv.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor depthwise_conv_over_time(const torch::Tensor& x, const torch::Tensor& weight, int64_t layer,
                                       const AttentionContext& context) {
  const int64_t kernel = weight.size(1);
  const int64_t length = x.size(1);
  const auto input = context.token_real.defined() ? x * context.token_real.unsqueeze(-1).to(x.dtype()) : x;
  const bool centred = context.mode == MaskMode::bidirectional;
  const int64_t before = centred ? (kernel - 1) / 2 : kernel - 1;  // inputs before t that the taps reach
  torch::Tensor padded;  // [B, k − 1 + T, C]
  if (centred) {
    TORCH_CHECK(context.cache == nullptr, "a centred convolution cannot decode incrementally");
    padded = torch::constant_pad_nd(input, {0, 0, before, kernel - 1 - before});
  } else if (context.cache) {
    padded = context.cache->conv_window(layer, input, kernel - 1);
  } else {
    padded = torch::constant_pad_nd(input, {0, 0, before, 0});
  }
  const auto w = weight.to(x.dtype());
  torch::Tensor padded_documents;  // with documents: each padded input's document, −1 outside the sequence
  if (context.documents.defined()) {
    TORCH_CHECK(context.cache == nullptr, "packed documents are for training and scoring, not incremental decoding");
    padded_documents = torch::constant_pad_nd(context.documents, {before, kernel - 1 - before}, -1);
  }
  // Tap i reads input t − offset + i; with documents only where that input shares t's document.
  const auto tap = [&](int64_t i) {
    const auto in = padded.slice(1, i, i + length);
    if (!padded_documents.defined()) return in;
    const auto same = padded_documents.slice(1, i, i + length) == context.documents;
    return in * same.unsqueeze(-1).to(x.dtype());
  };
  auto y = tap(0) * w.select(1, 0);
  for (int64_t i = 1; i < kernel; ++i) y = y + tap(i) * w.select(1, i);
  return y;
}

}  // namespace inkstone
