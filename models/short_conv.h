// Gated short convolution, LFM2's token mixer (Liquid AI; transformers models/lfm2; docs/backbones.md,
// "Gated short convolution"):
//   [B, C, x̃] = split₃(W_in u),   y_t = C_t ⊙ Σ_i w_i ⊙ (B ⊙ x̃)_{t−(k−1)+i},   out = W_out y
// with linear gates, a depthwise kernel of k taps (depthwise_conv.h: causal, centred when bidirectional) and no
// biases. Decoding keeps only the last k−1 values of B ⊙ x̃ per channel, so a token costs the same at any context.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"
#include "models/block_registry.h"
#include "models/mixer_context.h"

namespace inkstone {

class ShortConvImpl : public TokenMixer {
 public:
  // layer_index picks this layer's slot in a KV cache.
  ShortConvImpl(const ModelConfig& config, int64_t layer_index);
  // u: [B, T, d] (already normed) -> [B, T, d].
  torch::Tensor forward(const torch::Tensor& u, const AttentionContext& context) override;
  ParamRole role_of(const std::string& name) const override;
  static int64_t parameter_count(const ModelConfig& config);

  torch::nn::Linear in_proj{nullptr};   // d -> 3d: B, C, x̃
  torch::Tensor conv_weight;            // [d, k]
  torch::nn::Linear out_proj{nullptr};  // d -> d

 private:
  int64_t layer_index_;
};
TORCH_MODULE(ShortConv);

// Registry entry 'C' (models/block_registry.h).
TokenMixerKind short_conv_mixer_kind();

}  // namespace inkstone
