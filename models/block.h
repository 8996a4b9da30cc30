// One pre-norm transformer block (Qwen3; docs/backbones.md, "Base block"):
//   h = x + Mixer(RMSNorm₁(x)),  y = h + FeedForward(RMSNorm₂(h)),
// and, given a conditioning vector c, each branch modulated by adaLN-Zero (modulation.h). The layer patterns
// (layer_pattern.h) pick each layer's mixer (attention, gated short conv, ...) and feed-forward (SwiGLU, MoE, ...)
// from the registry (block_registry.h; docs/backbones.md, "Blocks and the registry").
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "config/config.h"
#include "models/block_parts.h"
#include "models/modulation.h"
#include "models/rms_norm.h"

namespace inkstone {

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const ModelConfig& config, int64_t layer_index);
  // x: [B, T, d]; cond: [B, cond_dim] or undefined (the plain residual).
  torch::Tensor forward(const torch::Tensor& x, const AttentionContext& context, const torch::Tensor& cond);

  // The two residual branches on their own, for an assembler that routes the residual stream itself
  // (models/residual_routing.h): forward is h + ffn_branch(h, m[1]) with h = x + mixer_branch(x, context, m[0]).
  // m = modulations(cond): one per branch, empty members without conditioning.
  std::vector<Modulation> modulations(const torch::Tensor& cond);
  torch::Tensor mixer_branch(const torch::Tensor& x, const AttentionContext& context, const Modulation& m);
  torch::Tensor ffn_branch(const torch::Tensor& h, const Modulation& m);
  // The branches after their norms, given the normalised input u (mixer_branch(x) = mixer_body(attn_norm(x))), for
  // an assembler that normalises the stream itself and so fuses the norm with the residual add before it.
  torch::Tensor mixer_body(const torch::Tensor& u, const AttentionContext& context, const Modulation& m);
  torch::Tensor ffn_body(const torch::Tensor& u, const Modulation& m);

  // The init role of the parameter `name` (as named inside the block; biases are zero before this is asked).
  ParamRole role_of(const std::string& name) const;

  RMSNorm attn_norm{nullptr};  // the mixer's norm, whichever the mixer
  std::shared_ptr<TokenMixer> mixer;  // registered under its kind's module name (attn, conv, ...)
  RMSNorm mlp_norm{nullptr};
  std::shared_ptr<FeedForward> ffn;   // likewise (mlp, moe, ...)
  AdaLN adaln{nullptr};  // only with ModelConfig::time_conditioning

 private:
  std::string mixer_name_;
  std::string ffn_name_;
};
TORCH_MODULE(Block);

}  // namespace inkstone
