// The head and a per-token loss over the vocabulary, row chunk by row chunk, so that no more than one chunk's
// [rows, V] logits (and what its terms derive from them) is alive at once (docs/training.md, "The vocabulary loss in
// chunks"). Every objective's per-token function runs unchanged on a chunk; what changes is when its gradient is
// formed:
//   - chunked_vocab_loss: the loss is a fixed weighted sum of per-token terms, so the gradient of each chunk with
//     respect to the hidden rows and the head weight is formed in the forward, right after the chunk's terms, and
//     backward only scales it (the approach of Liger-Kernel's fused linear cross-entropy);
//   - chunked_vocab_terms: the caller transforms the terms further (RL's sequence sums, ratios, clipping), so the
//     upstream gradient is known only in backward, which recomputes each chunk's logits once more.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <torch/types.h>

namespace inkstone {

// Per-token terms of one chunk: logits [n, V] float32 (the head's output, cast) of the flattened rows
// [begin, begin + n) -> [n, K] float32, differentiable in the logits.
using ChunkTermsFn = std::function<torch::Tensor(const torch::Tensor& logits, int64_t begin)>;

// Rows per chunk so that one chunk's float32 logits take at most `budget_mib` MiB (at least one row); budget 0:
// the device's own, 256 MiB on CUDA (large GEMMs, few launches) and 16 MiB elsewhere (on the CPU a chunk that stays
// in cache and below the allocator's mmap threshold trained AR at V = 50,304 about 25% faster than 256 MiB).
int64_t chunk_rows_for(int64_t vocab, int64_t budget_mib, bool cuda);

struct ChunkedLoss {
  torch::Tensor loss;   // 0-d float32: Σ_rows Σ_k coefficients[k] · terms[row, k]; differentiable
  torch::Tensor terms;  // [N, K] float32, detached: every term, also those that only report (metrics)
};

// hidden [N, d] (the head's input, rows flattened), weight [V, d] (logits = hidden · weightᵀ). One coefficient
// per column of the terms: 0 for a column that only reports (a metric).
ChunkedLoss chunked_vocab_loss(const torch::Tensor& hidden, const torch::Tensor& weight, const ChunkTermsFn& terms,
                               const std::vector<double>& coefficients, int64_t chunk_rows);

// The terms [N, K] themselves, differentiable in hidden and weight (backward recomputes each chunk's logits, so
// `terms` must own what it reads: backward calls it again after the caller has returned).
torch::Tensor chunked_vocab_terms(const torch::Tensor& hidden, const torch::Tensor& weight, const ChunkTermsFn& terms,
                                  int64_t chunk_rows);

}  // namespace inkstone
