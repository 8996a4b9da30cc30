// The two interchangeable parts of a block (models/block.h; docs/backbones.md, "Blocks and the registry"):
// a token mixer (attention, gated short conv, ...) and a feed-forward (SwiGLU, MoE, ...). The block, the
// initialiser, the width solver and the decoder ask a part about itself instead of matching its type or names.
#pragma once
#include <functional>
#include <string>

#include <torch/nn/module.h>

#include "models/init.h"
#include "models/mixer_context.h"

namespace inkstone {

class TokenMixer : public torch::nn::Module {
 public:
  // u: [B, T, d] (already normed) -> [B, T, d].
  virtual torch::Tensor forward(const torch::Tensor& u, const AttentionContext& context) = 0;
  // The init role of the parameter `name` (as named inside this module; biases are zero before this is asked).
  virtual ParamRole role_of(const std::string& name) const = 0;
  // Forward FLOPs per token beyond the weight matrices when a token sees `visible` slots (attention's q·k and
  // weights·v); the matrices are counted from the parameters.
  virtual double context_flops_per_token(double /*visible*/) const { return 0; }
};

// Receives a feed-forward's hidden activations, [B, T, F]: what analysis (`inkstone probe`, docs/probe.md) reads
// without the block knowing who asks.
using ActivationTap = std::function<void(const torch::Tensor&)>;

class FeedForward : public torch::nn::Module {
 public:
  // u: [B, T, d] (already normed) -> [B, T, d].
  virtual torch::Tensor forward(const torch::Tensor& u) = 0;
  virtual ParamRole role_of(const std::string& name) const = 0;
  // Whether forward hands its hidden activations to a tap (a dense feed-forward's one hidden layer; a mixture of
  // experts has one per expert and does not).
  virtual bool has_hidden_activations() const { return false; }
  // An empty tap stops the reports.
  void set_activation_tap(ActivationTap tap) { tap_ = std::move(tap); }

 protected:
  ActivationTap tap_;
};

}  // namespace inkstone
