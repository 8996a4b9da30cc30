// Depthwise convolution over time, shared by the conv token mixers (short_conv.h, qkv_conv.h). Channel c:
//   causal:  y_t = Σ_{i<k} w[c, i] · x_{t−(k−1)+i}      (w[c, k−1] is the current tap, PyTorch's Conv1d layout)
//   centred: y_t = Σ_{i<k} w[c, i] · x_{t−⌊(k−1)/2⌋+i}   (under a bidirectional mask, which sees both sides)
// Inputs outside the sequence and at padding tokens are 0, so padding carries nothing into real tokens, and so are
// inputs of another packed document (context.documents): the history resets at a document boundary. With a KV
// cache (causal only) the last k−1 inputs come from the cache, so decoding token by token equals the full forward.
#pragma once
#include <cstdint>

#include <torch/types.h>

#include "models/mixer_context.h"

namespace inkstone {

// x: [B, T, C]; weight: [C, k]; layer: this layer's slot in context.cache. Returns [B, T, C].
torch::Tensor depthwise_conv_over_time(const torch::Tensor& x, const torch::Tensor& weight, int64_t layer,
                                       const AttentionContext& context);

}  // namespace inkstone
