// The registered block parts, by their letter in model.mixer_pattern / model.ffn_pattern (models/layer_pattern.h).
// A part's own file defines its registry entry; models/block_registry.cpp lists the entries, one line each.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "models/block_parts.h"

namespace inkstone {

// A projection of a part: a Linear it holds under `name`, `copies` times (MoE experts), which LoRA can adapt
// (models/lora.h).
struct ProjectionShape {
  std::string name;
  int64_t in_features = 0;
  int64_t out_features = 0;
  int64_t copies = 1;
};

template <typename Part>
struct BlockPartKind {
  char letter;               // in the layer pattern
  std::string module_name;   // the part's name inside a block: its parameters' prefix in checkpoints
  std::string description;   // for error messages
  // The part of layer `layer`, built at the widths of `config` (a layer's own config under x-shaped widths).
  std::function<std::shared_ptr<Part>(const ModelConfig& config, int64_t layer)> make;
  // Its parameter count as `make` would build it, without building it (the width solver searches many widths).
  std::function<int64_t(const ModelConfig& config)> parameter_count;
  // Floats per token its training forward keeps for backward, at the widths of `config`, each query seeing
  // `context` tokens: the activation estimate of `inkstone train --dry-run` (docs/training.md, "Memory").
  std::function<double(const ModelConfig& config, int64_t context)> saved_floats_per_token;
  // The projections LoRA can adapt, at the widths of `config`; may be empty (none).
  std::function<std::vector<ProjectionShape>(const ModelConfig& config)> projections;
  // InputError for settings the part cannot be built with; may be empty.
  std::function<void(const ModelConfig& config)> check;
  // Why a captured CUDA graph cannot replay its decode step (sampler/decode_step.h); empty: it can.
  std::string graph_decode_obstacle;
  // Whether a Hugging Face architecture has this part (interop/hf_config.h): `export hf` refuses a model with any
  // part that does not say so.
  bool exportable_to_hf = false;
  // Token mixers: whether it mixes tokens only as a pass's attention rule allows (block diffusion's [x_0 | x_t]
  // layout); a convolution over time carries x_t into x_0 whatever the rule.
  bool follows_attention_rule = false;
  // Token mixers: whether it mixes a token's hidden-decoding streams (models/hidden_streams.h) in every layer; a
  // convolution over the slots does, attention only in its cross-stream layers (model.hidden_attention).
  bool crosses_streams = false;
};
using TokenMixerKind = BlockPartKind<TokenMixer>;
using FeedForwardKind = BlockPartKind<FeedForward>;

const std::vector<TokenMixerKind>& token_mixer_kinds();
const std::vector<FeedForwardKind>& feed_forward_kinds();

// The parts of layer `layer`: its letter of the tiled pattern, looked up in the registry.
const TokenMixerKind& token_mixer_of(const ModelConfig& config, int64_t layer);
const FeedForwardKind& feed_forward_of(const ModelConfig& config, int64_t layer);

// Whether every layer's token mixer, or some layer's, has `capability` (a flag of TokenMixerKind).
bool every_token_mixer(const ModelConfig& config, bool TokenMixerKind::*capability);
bool some_token_mixer(const ModelConfig& config, bool TokenMixerKind::*capability);
// Whether tokens meet only where a pass's attention rule lets them: every token mixer follows the rule and no QKV
// convolution runs over time (block diffusion's [x_0 | x_t], caches wound back, prompts packed into one row).
bool mixes_tokens_only_by_attention(const ModelConfig& config);

// InputError naming the key for a pattern letter no part is registered under, or a part's own refusal.
void check_block_patterns(const ModelConfig& config);

}  // namespace inkstone
