// Incremental decoding as the AR sampler does it, for tests that compare it with one full forward.
#pragma once
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "models/language_model.h"

namespace inkstone::testing {

// Logits of `tokens` [B, T] fed through `cache` in chunks of the given sizes (a prefill, then e.g. one token a
// step), concatenated along time.
inline torch::Tensor decode_in_chunks(LanguageModel& model, const torch::Tensor& tokens,
                                      const std::vector<int64_t>& chunks, KVCache& cache) {
  std::vector<torch::Tensor> pieces;
  int64_t done = 0;
  for (const int64_t size : chunks) {
    pieces.push_back(model->logits(model->extend_cache(tokens.narrow(1, done, size), cache)));
    done += size;
  }
  return torch::cat(pieces, 1);
}

// A prefill of the first `prefill` tokens, then one token a step, through a fresh cache.
inline torch::Tensor decode_in_pieces(LanguageModel& model, const torch::Tensor& tokens, int64_t prefill) {
  std::vector<int64_t> chunks{prefill};
  chunks.resize(static_cast<size_t>(tokens.size(1) - prefill + 1), 1);
  auto cache = model->make_kv_cache(tokens.size(0), tokens.size(1));
  return decode_in_chunks(model, tokens, chunks, cache);
}

// Prompts of `lengths` tokens (drawn from [0, vocab)) batched left-padded, with key padding and per-row positions
// as the sampler batches them, prefilled, then `steps` decode steps: every row must give the logits of its own
// unpadded sequence.
inline void expect_left_padded_decode_equals_each_row_alone(LanguageModel& model, const std::vector<int64_t>& lengths,
                                                            int64_t steps, int64_t vocab) {
  auto max_abs_diff = [](const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); };
  const int64_t rows = static_cast<int64_t>(lengths.size());
  const int64_t width = *std::max_element(lengths.begin(), lengths.end());
  const auto sequences = torch::randint(0, vocab, {rows, width + steps}, torch::kLong);
  auto prompt = torch::zeros({rows, width}, torch::kLong);
  auto real = torch::zeros({rows, width}, torch::kBool);
  auto positions = torch::zeros({rows, width}, torch::kLong);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pad = width - lengths[r];
    prompt[r].narrow(0, pad, lengths[r]).copy_(sequences[r].narrow(0, 0, lengths[r]));
    real[r].narrow(0, pad, lengths[r]).fill_(true);
    positions[r].narrow(0, pad, lengths[r]).copy_(torch::arange(lengths[r]));
  }
  auto cache = model->make_kv_cache(rows, width + steps);
  const auto prefill = model->logits(model->extend_cache(prompt, cache, {MaskMode::causal, positions, real}));
  std::vector<torch::Tensor> decoded;
  for (int64_t s = 0; s < steps; ++s) {
    auto next = torch::empty({rows, 1}, torch::kLong);
    auto next_positions = torch::empty({rows, 1}, torch::kLong);
    for (int64_t r = 0; r < rows; ++r) {
      next[r][0] = sequences[r][lengths[r] + s];
      next_positions[r][0] = lengths[r] + s;
    }
    decoded.push_back(model->logits(model->extend_cache(next, cache, {MaskMode::causal, next_positions, {}})));
  }
  for (int64_t r = 0; r < rows; ++r) {
    const auto alone = model(sequences[r].narrow(0, 0, lengths[r] + steps).unsqueeze(0))[0];
    const int64_t pad = width - lengths[r];
    EXPECT_LT(max_abs_diff(prefill[r].narrow(0, pad, lengths[r]), alone.narrow(0, 0, lengths[r])), 1e-5) << "row " << r;
    for (int64_t s = 0; s < steps; ++s)
      EXPECT_LT(max_abs_diff(decoded[s][r][0], alone[lengths[r] + s]), 1e-5) << "row " << r << " step " << s;
  }
}

}  // namespace inkstone::testing
