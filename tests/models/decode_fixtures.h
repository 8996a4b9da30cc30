// Incremental decoding as the AR sampler does it, for tests that compare it with one full forward.
#pragma once
#include <vector>

#include "models/language_model.h"

namespace inkstone::testing {

// Logits of `tokens` [B, T] through a KV cache: a prefill of the first `prefill` tokens, then one token a step.
inline torch::Tensor decode_in_pieces(LanguageModel& model, const torch::Tensor& tokens, int64_t prefill) {
  auto cache = model->make_kv_cache(tokens.size(0), tokens.size(1));
  ForwardArgs args;
  args.cache = &cache;
  std::vector<torch::Tensor> pieces{model->forward(tokens.narrow(1, 0, prefill), args).logits};
  for (int64_t t = prefill; t < tokens.size(1); ++t)
    pieces.push_back(model->forward(tokens.narrow(1, t, 1), args).logits);
  return torch::cat(pieces, 1);
}

}  // namespace inkstone::testing
