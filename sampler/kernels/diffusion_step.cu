// The fused diffusion step on the GPU: one block per token position, its threads splitting the vocabulary, the
// row code shared with the CPU (diffusion_step_row.h), uniforms from cuRAND's Philox device API keyed like the
// CPU twin's, so both draw the same token from the same logits (docs/kernels.md).
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include "core/kernels/launch_check.cuh"
#include "sampler/kernels/block_lanes.cuh"
#include "sampler/kernels/diffusion_step_cuda.h"

namespace inkstone::kernels {
namespace {

constexpr int64_t kMaxBlocks = 65535 * 16;

template <typename Logit>
__global__ void diffusion_step_kernel(const Logit* logits, const int64_t* z, const bool* support,
                                      const int64_t* sequences, int64_t positions, int64_t length, int64_t vocab,
                                      DiffusionRowParams params, int64_t* next) {
  __shared__ double values[kThreads];
  __shared__ int64_t indices[kThreads];
  BlockLanes lanes{values, indices};
  for (int64_t position = blockIdx.x; position < positions; position += gridDim.x) {
    const auto sequence = static_cast<uint64_t>(sequences[position / length]);
    CurandUniforms uniforms{params.seed, position_subsequence(sequence, static_cast<uint64_t>(position % length)),
                            params.step};
    const int64_t token =
        diffusion_step_row(logits + position * vocab, vocab, support, z[position], params, uniforms, lanes);
    if (threadIdx.x == 0) next[position] = token;
  }
}

template <typename Logit>
void launch(const Logit* logits, const int64_t* z, const bool* support, const int64_t* sequences, int64_t rows,
            int64_t length, int64_t vocab, const DiffusionRowParams& params, int64_t* next, void* stream) {
  const int64_t positions = rows * length;
  if (positions == 0) return;
  const auto blocks = static_cast<unsigned>(positions < kMaxBlocks ? positions : kMaxBlocks);
  diffusion_step_kernel<Logit><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      logits, z, support, sequences, positions, length, vocab, params, next);
  check_launch("fused diffusion step");
}

}  // namespace

void launch_diffusion_step_f32(const float* logits, const int64_t* z, const bool* support, const int64_t* sequences,
                               int64_t rows, int64_t length, int64_t vocab, const DiffusionRowParams& params,
                               int64_t* next, void* stream) {
  launch(logits, z, support, sequences, rows, length, vocab, params, next, stream);
}

void launch_diffusion_step_bf16(const Bf16Bits* logits, const int64_t* z, const bool* support,
                                const int64_t* sequences, int64_t rows, int64_t length, int64_t vocab,
                                const DiffusionRowParams& params, int64_t* next, void* stream) {
  launch(logits, z, support, sequences, rows, length, vocab, params, next, stream);
}

}  // namespace inkstone::kernels
