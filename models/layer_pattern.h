// Per-layer block kinds from the [model] pattern strings (docs/backbones.md, "Layer patterns"): a pattern of
// letters (spaces ignored) is tiled over the layers, so "CCA" with 18 layers gives attention at layers 2, 5, ..., 17
// and short conv elsewhere ("Gated short convolution"), and "DDDM" with 8 layers gives MoE at layers 3 and 7
// ("CE-MoE layout"); "LLLX" makes every fourth layer of a hidden-decoding model attend across streams
// ("Hidden decoding").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace inkstone {

enum class StreamScope { local, mixing };  // L, X: hidden decoding's attention (hidden_streams.h)

// The letter of each layer. The config checks that a pattern tiles the layers (config/config.cpp); the block
// registry, that its letters name registered parts (models/block_registry.h).
std::string expand_layer_pattern(const std::string& pattern, int64_t n_layers);

StreamScope stream_scope(const ModelConfig& config, int64_t layer);

}  // namespace inkstone
