#include "models/block.h"

#include <torch/torch.h>

#include "models/block_registry.h"

namespace inkstone {

BlockImpl::BlockImpl(const ModelConfig& config, int64_t layer_index) {
  attn_norm = register_module("attn_norm", RMSNorm(config.d_model, config.norm_eps));
  const TokenMixerKind& mixer_kind = token_mixer_of(config, layer_index);
  mixer_name_ = mixer_kind.module_name;
  mixer = register_module(mixer_name_, mixer_kind.make(config, layer_index));
  mlp_norm = register_module("mlp_norm", RMSNorm(config.d_model, config.norm_eps));
  const FeedForwardKind& ffn_kind = feed_forward_of(config, layer_index);
  ffn_name_ = ffn_kind.module_name;
  ffn = register_module(ffn_name_, ffn_kind.make(config, layer_index));
  if (config.time_conditioning) {
    adaln = register_module("adaln", AdaLN(config.cond_dim, config.d_model, /*num_sublayers=*/2, /*with_gate=*/true));
  }
}

ParamRole BlockImpl::role_of(const std::string& name) const {
  const auto inside = [&](const std::string& module) {
    return name.size() > module.size() && name.compare(0, module.size() + 1, module + ".") == 0;
  };
  if (inside("attn_norm") || inside("mlp_norm")) return ParamRole::norm;
  if (inside("adaln")) return ParamRole::zero;  // adaLN-Zero: the block starts as the identity
  if (inside(mixer_name_)) return mixer->role_of(name.substr(mixer_name_.size() + 1));
  if (inside(ffn_name_)) return ffn->role_of(name.substr(ffn_name_.size() + 1));
  throw std::logic_error("block parameter without an init role: " + name);
}

std::vector<Modulation> BlockImpl::modulations(const torch::Tensor& cond) {
  if (!cond.defined()) return std::vector<Modulation>(2);
  TORCH_CHECK(!adaln.is_empty(), "a conditioning vector needs model.time_conditioning = true");
  return adaln(cond);
}

torch::Tensor BlockImpl::mixer_branch(const torch::Tensor& x, const AttentionContext& context, const Modulation& m) {
  return mixer_body(attn_norm(x), context, m);
}

torch::Tensor BlockImpl::ffn_branch(const torch::Tensor& h, const Modulation& m) { return ffn_body(mlp_norm(h), m); }

torch::Tensor BlockImpl::mixer_body(const torch::Tensor& u, const AttentionContext& context, const Modulation& m) {
  return gate(mixer->forward(modulate(u, m), context), m);
}

torch::Tensor BlockImpl::ffn_body(const torch::Tensor& u, const Modulation& m) {
  return gate(ffn->forward(modulate(u, m)), m);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const AttentionContext& context,
                                 const torch::Tensor& cond) {
  const auto m = modulations(cond);
  const auto [h, u] = add_rms_norm(x, mixer_branch(x, context, m[0]), mlp_norm->weight, mlp_norm->eps());
  return h + ffn_body(u, m[1]);
}

}  // namespace inkstone
