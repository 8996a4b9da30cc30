// Widths that ModelConfig leaves at 0 ("derive it"), resolved in one place for every block and the KV cache.
#pragma once
#include <cstdint>

#include "config/config.h"
#include "models/rope.h"

namespace inkstone {

inline int64_t resolved_head_dim(const ModelConfig& config) {
  return config.head_dim > 0 ? config.head_dim : config.d_model / config.n_heads;
}

// SwiGLU keeps the parameter count of a 4d GELU MLP with 2/3 of the width (Shazeer 2020, §2), rounded up to a
// multiple of 64 for matmul-friendly shapes.
inline int64_t resolved_ffn_dim(const ModelConfig& config) {
  if (config.ffn_dim > 0) return config.ffn_dim;
  const int64_t two_thirds_of_4d = (8 * config.d_model + 2) / 3;
  return (two_thirds_of_4d + 63) / 64 * 64;
}

// Bytes of a KV cache of `rows` rows of `tokens` tokens (hidden decoding keeps one slot per stream and token), keys
// and values of `element_bytes` each: what sampling checks against memory and what `--dry-run` plans for rollouts.
inline double kv_cache_bytes(const ModelConfig& config, double rows, double tokens, double element_bytes) {
  const double slots = tokens * static_cast<double>(config.hidden_streams > 1 ? config.hidden_streams : 1);
  return 2.0 * static_cast<double>(config.n_layers * config.n_kv_heads * resolved_head_dim(config)) * rows * slots *
         element_bytes;
}

inline RopeScaling resolved_rope_scaling(const ModelConfig& config) {
  return {config.rope_scaling, config.rope_scaling_factor, config.rope_low_freq_factor, config.rope_high_freq_factor,
          config.rope_original_max_len};
}

}  // namespace inkstone
