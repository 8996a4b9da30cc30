// Wrapping a trained plain model with Delta AttnRes routing (docs/backbones.md, "Delta AttnRes"; Luo, Cai, Hu
// 2026): the routed model keeps every weight and adds routing sites whose gates start at α = 0, so it computes
// exactly the plain model's logits until training moves the gates.
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "models/language_model.h"

namespace inkstone {

// The plain config with delta routing: H heads, sources "sublayer" or "block" (N_b blocks). An InputError when
// `plain` is not a plain-residual model.
ModelConfig delta_routing_config(const ModelConfig& plain, int64_t heads, DeltaSources sources, int64_t blocks);

// Copies the plain model's weights into `routed` by name; the routing parameters keep their init. A weight the
// routed model lacks, or one of another shape, is an InputError naming `origin`.
void load_plain_weights(LanguageModelImpl& routed, const NamedTensors& plain_weights, const std::string& origin);

}  // namespace inkstone
