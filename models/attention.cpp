#include "models/attention.h"

#include <torch/torch.h>

#include "core/torch_compat.h"
#include "models/joint_linear.h"
#include "models/lora.h"
#include "models/kernels/qk_norm_rope.h"
#include "models/model_dims.h"

namespace inkstone {
namespace {

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
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
      head_dim_(resolved_head_dim(config)),
      qkv_conv_after_norm_(config.qkv_conv_position == QkvConvPosition::after_norm),
      qkv_conv_zero_init_(config.qkv_conv_zero_init),
      sink_(config.attention_sink) {
  TORCH_CHECK(n_heads_ % n_kv_heads_ == 0, "n_kv_heads must divide n_heads");
  const bool qkv_bias = config.attention_bias != AttentionBias::none;
  const bool o_bias = config.attention_bias == AttentionBias::all;
  q_proj = register_module("q_proj", linear(config.d_model, n_heads_ * head_dim_, qkv_bias));
  k_proj = register_module("k_proj", linear(config.d_model, n_kv_heads_ * head_dim_, qkv_bias));
  v_proj = register_module("v_proj", linear(config.d_model, n_kv_heads_ * head_dim_, qkv_bias));
  o_proj = register_module("o_proj", linear(n_heads_ * head_dim_, config.d_model, o_bias));
  if (config.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, config.norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, config.norm_eps));
  }
  if (config.qkv_conv) {
    const std::array<int64_t, 3> widths = {n_heads_ * head_dim_, n_kv_heads_ * head_dim_, n_kv_heads_ * head_dim_};
    qkv_conv = register_module("qkv_conv", QkvConv(widths, config.qkv_conv_kernel, layer_index));
  }
}

int64_t AttentionImpl::parameter_count(const ModelConfig& config) {
  const int64_t d = config.d_model, hd = resolved_head_dim(config);
  const int64_t q_width = config.n_heads * hd, kv_width = config.n_kv_heads * hd;
  int64_t count = 2 * d * q_width + 2 * d * kv_width;  // W_q, W_o, W_k, W_v
  if (config.attention_bias != AttentionBias::none) count += q_width + 2 * kv_width;
  if (config.attention_bias == AttentionBias::all) count += d;
  if (config.qk_norm) count += 2 * hd;
  if (config.qkv_conv) count += (q_width + 2 * kv_width) * config.qkv_conv_kernel;
  return count;
}

// What autograd keeps: the rotated queries and keys (the keys repeated to every query head under grouped queries
// where libtorch cannot group, and the values with them), the joint q | k | v projection (the values are a view of
// it; the QK-norm and RoPE read it again in backward), the attention weights (the explicit path of libtorch 1.13
// keeps all `context` of them per head; 2.x's kernels a few floats per query) and o_proj's input.
double AttentionImpl::saved_floats_per_token(const ModelConfig& config, int64_t context) {
  const double hd = static_cast<double>(resolved_head_dim(config));
  const double q = static_cast<double>(config.n_heads) * hd, kv = static_cast<double>(config.n_kv_heads) * hd;
  const bool repeated = config.n_heads != config.n_kv_heads && !compat::kAttentionKeepsNoWeights;
  const double weights = compat::kAttentionKeepsNoWeights ? 2.0 * static_cast<double>(config.n_heads)
                                                          : static_cast<double>(config.n_heads * context);
  double floats = 2 * q + (repeated ? 2 * q : kv) + (q + 2 * kv) + weights;
  if (config.qkv_conv) floats += 2 * (q + 2 * kv);
  return floats;
}

ParamRole AttentionImpl::role_of(const std::string& name) const {
  const auto starts = [&](const char* prefix) { return name.rfind(prefix, 0) == 0; };
  if (starts("q_norm.") || starts("k_norm.")) return ParamRole::norm;
  if (starts("q_proj.") || starts("k_proj.")) return ParamRole::qk;
  if (starts("v_proj.") || starts("o_proj.")) return ParamRole::vo;
  if (starts("qkv_conv.")) return qkv_conv_zero_init_ ? ParamRole::zero : ParamRole::conv;
  throw std::logic_error("attention parameter without an init role: " + name);
}

// q·kᵀ and weights·v: 2 multiply-adds per visible slot and query coordinate.
double AttentionImpl::context_flops_per_token(double visible) const {
  return 4.0 * visible * static_cast<double>(n_heads_ * head_dim_);
}

TokenMixerKind attention_mixer_kind() {
  TokenMixerKind kind;
  kind.letter = 'A';
  kind.module_name = "attn";
  kind.description = "grouped-query attention";
  kind.exportable_to_hf = true;
  kind.follows_attention_rule = true;
  kind.make = [](const ModelConfig& config, int64_t layer) { return std::make_shared<AttentionImpl>(config, layer); };
  kind.parameter_count = AttentionImpl::parameter_count;
  kind.saved_floats_per_token = AttentionImpl::saved_floats_per_token;
  kind.projections = [](const ModelConfig& config) {
    const int64_t d = config.d_model, q = config.n_heads * resolved_head_dim(config),
                  kv = config.n_kv_heads * resolved_head_dim(config);
    return std::vector<ProjectionShape>{{"q_proj", d, q}, {"k_proj", d, kv}, {"v_proj", d, kv}, {"o_proj", q, d}};
  };
  return kind;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& u, const AttentionContext& context) {
  const int64_t q_width = n_heads_ * head_dim_, kv_width = n_kv_heads_ * head_dim_;
  std::vector<torch::Tensor> biases;
  if (q_proj->bias.defined()) biases = {q_proj->bias, k_proj->bias, v_proj->bias};
  const auto joint =
      plus_joint_lora({q_proj, k_proj, v_proj}, u, joint_linear(u, {q_proj->weight, k_proj->weight, v_proj->weight}, biases));
  const auto parts = joint.split_with_sizes({q_width, kv_width, kv_width}, -1);
  std::array<torch::Tensor, 3> qkv = {parts[0], parts[1], parts[2]};  // [B, T, H·h_d] each
  const bool conv = !qkv_conv.is_empty();
  if (conv && !qkv_conv_after_norm_) qkv = qkv_conv(qkv, context);
  // [B, H, T, h_d] for SDPA.
  const auto heads_first = [&](const torch::Tensor& x, int64_t heads) {
    return per_head(x, heads, head_dim_).transpose(1, 2);
  };
  auto q = heads_first(qkv[0], n_heads_), k = heads_first(qkv[1], n_kv_heads_);
  const bool norm_then_rope = !q_norm.is_empty() && !(conv && qkv_conv_after_norm_);
  if (norm_then_rope && fused_qk_norm_rope_applies(q)) {
    // QK-norm and RoPE in one pass per projection (models/kernels/qk_norm_rope.h).
    q = fused_qk_norm_rope(q, q_norm->weight, q_norm->eps(), context.rope.cos, context.rope.sin);
    k = fused_qk_norm_rope(k, k_norm->weight, k_norm->eps(), context.rope.cos, context.rope.sin);
  } else {
    // QK-norm normalises each head over its h_d coordinates.
    if (!q_norm.is_empty()) {
      qkv[0] = q_norm(per_head(qkv[0], n_heads_, head_dim_)).flatten(2);
      qkv[1] = k_norm(per_head(qkv[1], n_kv_heads_, head_dim_)).flatten(2);
    }
    if (conv && qkv_conv_after_norm_) qkv = qkv_conv(qkv, context);
    q = apply_rope(heads_first(qkv[0], n_heads_), context.rope);
    k = apply_rope(heads_first(qkv[1], n_kv_heads_), context.rope);
  }
  auto v = heads_first(qkv[2], n_kv_heads_);
  if (context.cache) {
    std::tie(k, v) = context.write_slot.defined() ? context.cache->append_at(layer_index_, context.write_slot, k, v)
                                                   : context.cache->append(layer_index_, k, v);
  }

  // Grouped queries: query head h reads KV head ⌊h·n_kv/n_q⌋ (compat::sdpa repeats K and V only where libtorch
  // cannot group).
  // A cache kept in another dtype than the layer's (sample.cache_dtype): attention runs in the cache's.
  const auto compute_dtype = q.scalar_type();
  if (k.scalar_type() != compute_dtype) q = q.to(k.scalar_type());
  const auto y = context.document_buckets
                     ? attend_within_documents(q, k, v, *context.document_buckets, context.mode == MaskMode::causal,
                                               sink_)
                     : compat::sdpa(q, k, v, context.mask.allowed, context.mask.is_causal, sink_);
  const auto heads = y.to(compute_dtype).transpose(1, 2).reshape({u.size(0), u.size(1), n_heads_ * head_dim_});
  return plus_lora(o_proj, heads, o_proj(heads));
}

}  // namespace inkstone
