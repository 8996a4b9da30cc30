// Hidden decoding (docs/backbones.md, "Hidden decoding"; the Sequential-Hidden-Decoding model cards): n embedding
// tables E⁽¹⁾..E⁽ⁿ⁾ encode every token n times and the copies are interleaved, slot n·t + s holding E⁽ˢ⁺¹⁾(x_t)
// (s = 0..n−1), so one stack runs over n·T slots. Only the last copy of each token is read out, hence it alone
// carries the loss of whichever objective trains the model; the earlier copies are latent computation. E⁽ⁿ⁾ is the
// model's own `embed` table (tied to the head when the head is tied), so n = 1 is exactly the plain model.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "config/config.h"
#include "models/attention_mask.h"

namespace inkstone {

// Hidden decoding needs a layer across streams: without one the last copy of a token cannot read the others. A
// warning on stderr for such a config (n > 1).
void warn_if_streams_never_cross(const ModelConfig& config);

// The slot bookkeeping; with n = 1 every function returns its input.
class StreamLayout {
 public:
  explicit StreamLayout(const ModelConfig& config);

  int64_t streams() const { return n_; }

  // n copies [B, T, d], stream 1 first -> [B, n·T, d] in slot order.
  torch::Tensor interleave(const std::vector<torch::Tensor>& copies) const;
  // [B, n·T, ...] -> [B, T, ...]: the last stream of every token, the slots the loss reads.
  torch::Tensor last_stream(const torch::Tensor& slots) const;
  // Token positions [B, T] -> RoPE positions of the slots [B, n·T]: interleaved n·p + s, or per_token p.
  torch::Tensor slot_positions(const torch::Tensor& token_positions) const;
  // A per-token flag [B, T] (e.g. key padding) for each of the token's slots; undefined stays undefined.
  torch::Tensor slot_flags(const torch::Tensor& token_flags) const;

  // Stream-local attention: a query sees the keys of its own stream (earlier tokens when causal, all when
  // bidirectional), and with hidden_local_sees_token also its own token's earlier streams (all under a
  // bidirectional mask). Slots and padding as in make_attention_mask; slot j is stream j mod n of token ⌊j/n⌋.
  // Cross-stream layers use make_attention_mask itself: causal over the slot order is exactly "t′ < t, or t′ = t
  // and s′ ≤ s".
  AttentionMask local_mask(MaskMode mode, int64_t query_start, int64_t num_queries, int64_t num_keys,
                           const torch::Tensor& key_real, const torch::Device& device) const;

 private:
  int64_t n_;
  bool per_token_positions_;
  bool local_sees_token_;
};

}  // namespace inkstone
