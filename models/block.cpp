#include "models/block.h"

#include <torch/torch.h>

#include "models/model_dims.h"

namespace inkstone {

BlockImpl::BlockImpl(const ModelConfig& config, int64_t layer_index) {
  attn_norm = register_module("attn_norm", RMSNorm(config.d_model, config.norm_eps));
  attn = register_module("attn", Attention(config, layer_index));
  mlp_norm = register_module("mlp_norm", RMSNorm(config.d_model, config.norm_eps));
  mlp = register_module("mlp", SwiGLU(config.d_model, resolved_ffn_dim(config)));
  if (config.time_conditioning) {
    adaln = register_module("adaln", AdaLN(config.cond_dim, config.d_model, /*num_sublayers=*/2, /*with_gate=*/true));
  }
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const AttentionContext& context,
                                 const torch::Tensor& cond) {
  std::vector<Modulation> m(2);
  if (cond.defined()) {
    TORCH_CHECK(!adaln.is_empty(), "a conditioning vector needs model.time_conditioning = true");
    m = adaln(cond);
  }
  auto h = x + gate(attn(modulate(attn_norm(x), m[0]), context), m[0]);
  return h + gate(mlp(modulate(mlp_norm(h), m[1])), m[1]);
}

}  // namespace inkstone
