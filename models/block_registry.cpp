// One line per block part: its file defines the entry (letter, module name, factory, parameter count).
#include "models/block_registry.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "models/attention.h"
#include "models/layer_pattern.h"
#include "models/mlp.h"
#include "models/moe.h"
#include "models/short_conv.h"

namespace inkstone {

const std::vector<TokenMixerKind>& token_mixer_kinds() {
  static const std::vector<TokenMixerKind> kinds = {
      attention_mixer_kind(),
      short_conv_mixer_kind(),
  };
  return kinds;
}

const std::vector<FeedForwardKind>& feed_forward_kinds() {
  static const std::vector<FeedForwardKind> kinds = {
      swiglu_feed_forward_kind(),
      moe_feed_forward_kind(),
  };
  return kinds;
}

namespace {

template <typename Part>
std::string letters_of(const std::vector<BlockPartKind<Part>>& kinds) {
  std::string letters;
  for (const auto& kind : kinds) letters += kind.letter;
  return letters;
}

template <typename Part>
const BlockPartKind<Part>* find_kind(const std::vector<BlockPartKind<Part>>& kinds, char letter) {
  for (const auto& kind : kinds)
    if (kind.letter == letter) return &kind;
  return nullptr;
}

// Every letter of model.<key> = `pattern` names a registered part, whose own checks pass.
template <typename Part>
void check_pattern(const char* key, const std::string& pattern, const std::vector<BlockPartKind<Part>>& kinds,
                   const ModelConfig& config) {
  for (char letter : pattern) {
    if (letter == ' ') continue;
    const auto* kind = find_kind(kinds, letter);
    if (!kind)
      throw InputError(fmt::format("model.{} = \"{}\" has '{}'; allowed letters: {}", key, pattern, letter,
                                   letters_of(kinds)));
    if (kind->check) kind->check(config);
  }
}

// The kind layer `layer`'s letter of `pattern` names.
template <typename Part>
const BlockPartKind<Part>& kind_of_layer(const std::vector<BlockPartKind<Part>>& kinds, const std::string& pattern,
                                         const ModelConfig& config, int64_t layer) {
  const auto* kind = find_kind(kinds, expand_layer_pattern(pattern, config.n_layers).at(layer));
  if (!kind) check_block_patterns(config);  // throws, naming the key
  return *kind;
}

}  // namespace

const TokenMixerKind& token_mixer_of(const ModelConfig& config, int64_t layer) {
  return kind_of_layer(token_mixer_kinds(), config.mixer_pattern, config, layer);
}

const FeedForwardKind& feed_forward_of(const ModelConfig& config, int64_t layer) {
  return kind_of_layer(feed_forward_kinds(), config.ffn_pattern, config, layer);
}

bool every_token_mixer(const ModelConfig& config, bool TokenMixerKind::*capability) {
  for (int64_t layer = 0; layer < config.n_layers; ++layer)
    if (!(token_mixer_of(config, layer).*capability)) return false;
  return true;
}

bool some_token_mixer(const ModelConfig& config, bool TokenMixerKind::*capability) {
  for (int64_t layer = 0; layer < config.n_layers; ++layer)
    if (token_mixer_of(config, layer).*capability) return true;
  return false;
}

bool mixes_tokens_only_by_attention(const ModelConfig& config) {
  return every_token_mixer(config, &TokenMixerKind::follows_attention_rule) && !config.qkv_conv;
}

void check_block_patterns(const ModelConfig& config) {
  check_pattern("mixer_pattern", config.mixer_pattern, token_mixer_kinds(), config);
  check_pattern("ffn_pattern", config.ffn_pattern, feed_forward_kinds(), config);
}

}  // namespace inkstone
