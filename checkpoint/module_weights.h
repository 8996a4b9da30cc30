// A module's parameters as named tensors, and loading them back with shape checks.
#pragma once
#include <string>

#include <torch/nn/module.h>

#include "checkpoint/safetensors.h"

namespace inkstone {

NamedTensors module_weights(const torch::nn::Module& module);
// Copies every parameter of `module` from `weights`; a missing or reshaped one is an InputError naming `origin`,
// and so is one whose dtype the module's would round (bf16 weights load exactly into an fp32 model; fp32 weights
// into a bf16 model would not).
// With keep_missing, a parameter `weights` lacks keeps its value instead of being an error.
void load_module_weights(torch::nn::Module& module, const NamedTensors& weights, const std::string& origin,
                         bool keep_missing = false);

// Stores every floating-point parameter of `module` in `dtype` (buffers keep theirs: position tables, router
// biases). The tensors keep their identity, so optimizers and hooks made later see the cast ones.
void cast_parameters(torch::nn::Module& module, torch::ScalarType dtype);
// The dtype of `module`'s floating-point parameters (fp32 for a module without any); mixed ones are a logic error.
torch::ScalarType parameter_dtype(const torch::nn::Module& module);

}  // namespace inkstone
