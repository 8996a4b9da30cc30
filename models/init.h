// Weight initialisation schemes, chosen by ModelConfig::init. A scheme sees every parameter with its role, so a
// scheme can treat the groups differently (γ-init's per-group σ = fan_in^(−γ); docs/backbones.md, "Init roles"
// and "Gamma initialisation").
#pragma once
#include <functional>
#include <string>

#include <torch/types.h>

#include "config/config.h"

namespace inkstone {

enum class ParamRole {
  embedding,     // token embedding [V, d] (fan_in = d)
  qk,            // W_q, W_k
  vo,            // W_v, W_o
  mlp,           // SwiGLU gate, up, down
  head,          // untied output head
  norm,          // RMSNorm gains
  conv,          // depthwise convolution taps [C, k] (fan_in = k)
  conditioning,  // noise-level embedding MLP weights
  zero,          // zero by the architecture's definition: adaLN-Zero, a conditioned model's head, biases
};

std::string to_string(ParamRole role);

// Fills one parameter in place (under NoGradGuard); 2-D weights are [out, in], so fan_in = size(1).
using InitScheme = std::function<void(const std::string& name, torch::Tensor& param, ParamRole role)>;

// The scheme registered under config.init; throws InputError naming the known schemes otherwise.
InitScheme make_init_scheme(const ModelConfig& config);
// Whether the scheme's σ follows each matrix's fan_in (γ-init), so layers of another width need no correction.
bool init_scheme_follows_width(const ModelConfig& config);

}  // namespace inkstone
