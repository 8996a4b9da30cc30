// The keyed token draw on the GPU: one block per row, its threads splitting the vocabulary, the row code shared
// with the CPU (token_draw_row.h), uniforms from cuRAND's Philox keyed like the CPU twin's (docs/kernels.md).
#include <cuda_runtime.h>

#include "core/kernels/launch_check.cuh"
#include "sampler/kernels/block_lanes.cuh"
#include "sampler/kernels/token_draw_cuda.h"
#include "sampler/kernels/token_draw_row.h"

namespace inkstone::kernels {
namespace {

constexpr int64_t kMaxBlocks = 65535 * 16;

template <typename Logit>
__global__ void token_draw_kernel(const Logit* logits, const int64_t* sequences, const int64_t* positions,
                                  int64_t rows, int64_t vocab, FilterParams filter, uint64_t seed, int64_t* tokens,
                                  float* log_probs) {
  __shared__ double values[kThreads];
  __shared__ int64_t indices[kThreads];
  BlockLanes lanes{values, indices};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    CurandUniforms uniforms{seed,
                            position_subsequence(static_cast<uint64_t>(sequences[row]),
                                                 static_cast<uint64_t>(positions[row])),
                            0};
    const TokenDraw draw = token_draw_row(logits + row * vocab, vocab, filter, uniforms, lanes);
    if (threadIdx.x == 0) {
      tokens[row] = draw.token;
      log_probs[row] = static_cast<float>(draw.log_prob);
    }
  }
}

template <typename Logit>
void launch(const Logit* logits, const int64_t* sequences, const int64_t* positions, int64_t rows, int64_t vocab,
            const FilterParams& filter, uint64_t seed, int64_t* tokens, float* log_probs, void* stream) {
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
  token_draw_kernel<Logit><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, sequences, positions, rows, vocab, filter, seed, tokens, log_probs);
  check_launch("keyed token draw");
}

}  // namespace

void launch_token_draw_f32(const float* logits, const int64_t* sequences, const int64_t* positions, int64_t rows,
                           int64_t vocab, const FilterParams& filter, uint64_t seed, int64_t* tokens,
                           float* log_probs, void* stream) {
  launch(logits, sequences, positions, rows, vocab, filter, seed, tokens, log_probs, stream);
}

void launch_token_draw_bf16(const Bf16Bits* logits, const int64_t* sequences, const int64_t* positions, int64_t rows,
                            int64_t vocab, const FilterParams& filter, uint64_t seed, int64_t* tokens,
                            float* log_probs, void* stream) {
  launch(logits, sequences, positions, rows, vocab, filter, seed, tokens, log_probs, stream);
}

}  // namespace inkstone::kernels
