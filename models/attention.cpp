#include "models/attention.h"

#include <torch/torch.h>

#include "core/torch_compat.h"
#include "models/model_dims.h"

namespace inkstone {
namespace {

torch::nn::Linear linear_no_bias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// [B, T, H·h_d] -> [B, T, H, h_d]
torch::Tensor per_head(const torch::Tensor& x, int64_t heads, int64_t head_dim) {
  return x.view({x.size(0), x.size(1), heads, head_dim});
}

}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& config, int64_t layer_index)
    : layer_index_(layer_index),
      n_heads_(config.n_heads),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(resolved_head_dim(config)) {
  TORCH_CHECK(n_heads_ % n_kv_heads_ == 0, "n_kv_heads must divide n_heads");
  q_proj = register_module("q_proj", linear_no_bias(config.d_model, n_heads_ * head_dim_));
  k_proj = register_module("k_proj", linear_no_bias(config.d_model, n_kv_heads_ * head_dim_));
  v_proj = register_module("v_proj", linear_no_bias(config.d_model, n_kv_heads_ * head_dim_));
  o_proj = register_module("o_proj", linear_no_bias(n_heads_ * head_dim_, config.d_model));
  q_norm = register_module("q_norm", RMSNorm(head_dim_, config.norm_eps));
  k_norm = register_module("k_norm", RMSNorm(head_dim_, config.norm_eps));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& u, const AttentionContext& context) {
  // [B, H, T, h_d] for SDPA; QK-norm normalises each head over its h_d coordinates.
  auto q = q_norm(per_head(q_proj(u), n_heads_, head_dim_)).transpose(1, 2);
  auto k = k_norm(per_head(k_proj(u), n_kv_heads_, head_dim_)).transpose(1, 2);
  auto v = per_head(v_proj(u), n_kv_heads_, head_dim_).transpose(1, 2);
  q = apply_rope(q, context.rope);
  k = apply_rope(k, context.rope);
  if (context.cache) std::tie(k, v) = context.cache->append(layer_index_, k, v);

  // Repeating each KV head n_q/n_kv times in a row gives query head h the KV head ⌊h·n_kv/n_q⌋.
  const int64_t group = n_heads_ / n_kv_heads_;
  if (group > 1) {
    k = k.repeat_interleave(group, 1);
    v = v.repeat_interleave(group, 1);
  }
  const auto y = compat::sdpa(q, k, v, context.mask.allowed, context.mask.is_causal);
  return o_proj(y.transpose(1, 2).reshape({u.size(0), u.size(1), n_heads_ * head_dim_}));
}

}  // namespace inkstone
