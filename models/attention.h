// Grouped-query self-attention with per-head QK RMSNorm before RoPE (Qwen3; backbones.md §1):
//   q, k, v = W_q u, W_k u, W_v u;  q, k ← RoPE(RMSNorm(q)), RoPE(RMSNorm(k));  W_o · softmax(q kᵀ/√h_d + mask) v
// Query head h reads KV head ⌊h·n_kv/n_q⌋. No biases.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "core/config.h"
#include "models/attention_mask.h"
#include "models/kv_cache.h"
#include "models/rms_norm.h"
#include "models/rope.h"

namespace inkstone {

// What every attention layer of one forward shares.
struct AttentionContext {
  RopeTable rope;
  AttentionMask mask;
  KVCache* cache = nullptr;  // null: no incremental decoding
};

class AttentionImpl : public torch::nn::Module {
 public:
  // layer_index picks this layer's slot in a KV cache.
  AttentionImpl(const ModelConfig& config, int64_t layer_index);
  // u: [B, T, d] (already normed) -> [B, T, d].
  torch::Tensor forward(const torch::Tensor& u, const AttentionContext& context);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  int64_t layer_index_;
  int64_t n_heads_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
};
TORCH_MODULE(Attention);

}  // namespace inkstone
