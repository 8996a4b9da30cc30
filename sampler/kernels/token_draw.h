// The keyed token draw of AR decoding (sampler/kernels/token_draw_row.h) over a batch of rows: on the CPU by the
// row code itself, on a GPU by the CUDA kernel that runs the same row code (docs/kernels.md, "Keyed token draws").
#pragma once
#include <cstdint>

#include <torch/types.h>

#include "sampler/kernels/filter_row.h"

namespace inkstone {

struct KeyedDraws {
  torch::Tensor tokens;     // [N] int64
  torch::Tensor log_probs;  // [N] float32: log x̂ of each token (0 when greedy)
};

// logits: [N, V] float32 or bfloat16; sequences, positions: [N] int64, each row's global sequence number and the
// position of the token it draws (the row's Philox stream, philox.h), all on one device. filter.support_size = V.
KeyedDraws keyed_token_draw(const torch::Tensor& logits, const torch::Tensor& sequences,
                            const torch::Tensor& positions, const kernels::FilterParams& filter, uint64_t seed);

}  // namespace inkstone
