// One pre-norm transformer block (Qwen3; docs/backbones.md, "Base block"):
//   h = x + Attn(RMSNorm₁(x)),  y = h + SwiGLU(RMSNorm₂(h)),
// and, given a conditioning vector c, each branch modulated by adaLN-Zero (modulation.h). The layer patterns
// (layer_pattern.h) swap the mixer for a gated short conv (LFM2; docs/backbones.md, "Gated short convolution") and
// the SwiGLU for a mixture of experts ("Mixture of experts").
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "core/config.h"
#include "models/attention.h"
#include "models/mlp.h"
#include "models/modulation.h"
#include "models/moe.h"
#include "models/rms_norm.h"
#include "models/short_conv.h"

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

  RMSNorm attn_norm{nullptr};  // the mixer's norm, whichever the mixer
  Attention attn{nullptr};     // mixer: exactly one of attn, conv
  ShortConv conv{nullptr};
  RMSNorm mlp_norm{nullptr};
  SwiGLU mlp{nullptr};         // feed-forward: exactly one of mlp, moe
  MoE moe{nullptr};
  AdaLN adaln{nullptr};  // only with ModelConfig::time_conditioning
};
TORCH_MODULE(Block);

}  // namespace inkstone
