// Grouped-query self-attention with per-head QK RMSNorm before RoPE (Qwen3; docs/backbones.md, "Base block"):
//   q, k, v = W_q u, W_k u, W_v u;  q, k ← RoPE(RMSNorm(q)), RoPE(RMSNorm(k));  W_o · softmax(q kᵀ/√h_d + mask) v
// (q, k and v as one product, models/joint_linear.h; the QK-norm and RoPE as one kernel, models/kernels/qk_norm_rope.h).
// Query head h reads KV head ⌊h·n_kv/n_q⌋. Biases on q, k, v (Qwen2) or on all four projections (Llama's
// attention_bias) by ModelConfig::attention_bias; the QK-norm can be off (Llama, Qwen2). Optionally a depthwise residual conv over time on [q | k | v]
// before RoPE (qkv_conv.h), before or after the QK-norm. Optionally an off-by-one softmax (an attention sink,
// ModelConfig::attention_sink; Sumi).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"
#include "models/block_registry.h"
#include "models/mixer_context.h"
#include "models/qkv_conv.h"
#include "models/rms_norm.h"

namespace inkstone {

class AttentionImpl : public TokenMixer {
 public:
  // layer_index picks this layer's slot in a KV cache.
  AttentionImpl(const ModelConfig& config, int64_t layer_index);
  // u: [B, T, d] (already normed) -> [B, T, d].
  torch::Tensor forward(const torch::Tensor& u, const AttentionContext& context) override;
  ParamRole role_of(const std::string& name) const override;
  double context_flops_per_token(double visible) const override;
  static int64_t parameter_count(const ModelConfig& config);
  static double saved_floats_per_token(const ModelConfig& config, int64_t context);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // only with ModelConfig::qk_norm
  QkvConv qkv_conv{nullptr};  // only with ModelConfig::qkv_conv

 private:
  int64_t layer_index_;
  int64_t n_heads_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
  bool qkv_conv_after_norm_;
  bool qkv_conv_zero_init_;
  bool sink_;  // off-by-one softmax (core/explicit_attention.h)
};
TORCH_MODULE(Attention);

// Registry entry 'A' (models/block_registry.h).
TokenMixerKind attention_mixer_kind();

}  // namespace inkstone
