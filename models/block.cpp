#include "models/block.h"

#include <torch/torch.h>

#include "models/layer_pattern.h"
#include "models/model_dims.h"

namespace inkstone {

BlockImpl::BlockImpl(const ModelConfig& config, int64_t layer_index) {
  attn_norm = register_module("attn_norm", RMSNorm(config.d_model, config.norm_eps));
  if (mixer_kind(config, layer_index) == MixerKind::short_conv) {
    conv = register_module("conv", ShortConv(config, layer_index));
  } else {
    attn = register_module("attn", Attention(config, layer_index));
  }
  mlp_norm = register_module("mlp_norm", RMSNorm(config.d_model, config.norm_eps));
  if (ffn_kind(config, layer_index) == FfnKind::moe) {
    moe = register_module("moe", MoE(config, layer_index));
  } else {
    mlp = register_module("mlp", SwiGLU(config.d_model, resolved_ffn_dim(config)));
  }
  if (config.time_conditioning) {
    adaln = register_module("adaln", AdaLN(config.cond_dim, config.d_model, /*num_sublayers=*/2, /*with_gate=*/true));
  }
}

std::vector<Modulation> BlockImpl::modulations(const torch::Tensor& cond) {
  if (!cond.defined()) return std::vector<Modulation>(2);
  TORCH_CHECK(!adaln.is_empty(), "a conditioning vector needs model.time_conditioning = true");
  return adaln(cond);
}

torch::Tensor BlockImpl::mixer_branch(const torch::Tensor& x, const AttentionContext& context, const Modulation& m) {
  const auto u = modulate(attn_norm(x), m);
  return gate(conv.is_empty() ? attn(u, context) : conv(u, context), m);
}

torch::Tensor BlockImpl::ffn_branch(const torch::Tensor& h, const Modulation& m) {
  const auto u = modulate(mlp_norm(h), m);
  return gate(moe.is_empty() ? mlp(u) : moe(u), m);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const AttentionContext& context,
                                 const torch::Tensor& cond) {
  const auto m = modulations(cond);
  auto h = x + mixer_branch(x, context, m[0]);
  return h + ffn_branch(h, m[1]);
}

}  // namespace inkstone
