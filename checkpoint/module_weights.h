// A module's parameters as named tensors, and loading them back with shape checks.
#pragma once
#include <string>

#include <torch/nn/module.h>

#include "checkpoint/safetensors.h"

namespace inkstone {

NamedTensors module_weights(const torch::nn::Module& module);
// Copies every parameter of `module` from `weights`; a missing or reshaped one is an InputError naming `origin`.
void load_module_weights(torch::nn::Module& module, const NamedTensors& weights, const std::string& origin);

}  // namespace inkstone
