// What the sampler's CUDA kernels share (diffusion_step.cu, token_draw.cu): a block's threads as the row code's
// lanes, and cuRAND's Philox device API at the counter the CPU twin (philox.h) computes.
#pragma once
#include <cuda_runtime.h>
#include <curand_kernel.h>

#include "core/kernels/block_sum.cuh"
#include "sampler/kernels/philox.h"

namespace inkstone::kernels {

constexpr int kThreads = 256;  // threads per row; a power of two: the tree reductions halve it

// A block's threads as the row code's lanes; every reduction is reached by all of them (the row code only returns
// early on a condition the whole block shares).
struct BlockLanes {
  double* values;
  int64_t* indices;

  __device__ int64_t first() const { return threadIdx.x; }
  __device__ int64_t stride() const { return blockDim.x; }

  __device__ double sum(double value) const { return block_sum(values, value); }

  // The largest value and, among equals, the smallest index, to every thread.
  __device__ void argmax(double& value, int64_t& index) const {
    values[threadIdx.x] = value;
    indices[threadIdx.x] = index;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        const double other = values[threadIdx.x + half];
        const int64_t other_index = indices[threadIdx.x + half];
        if (other > values[threadIdx.x] || (other == values[threadIdx.x] && other_index < indices[threadIdx.x])) {
          values[threadIdx.x] = other;
          indices[threadIdx.x] = other_index;
        }
      }
      __syncthreads();
    }
    value = values[0];
    index = indices[0];
    __syncthreads();
  }
};

// cuRAND's Philox4x32-10 bijection at the twin's counter (offset low, offset high, subsequence low, subsequence
// high) and key (the seed): one evaluation per block. curand_init + curand4 would reach the same block but evaluate
// Philox twice per call (curand_init precomputes the state's next output).
struct CurandUniforms {
  uint64_t seed, subsequence;
  uint32_t step;
  __device__ double at(int64_t v) const {
    const uint64_t offset = step_offset(step, static_cast<uint64_t>(v) / 2);
    const uint4 counter = make_uint4(static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                                     static_cast<uint32_t>(subsequence), static_cast<uint32_t>(subsequence >> 32));
    const uint4 block =
        curand_Philox4x32_10(counter, make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)));
    return v % 2 == 0 ? uniform_from_words(block.x, block.y) : uniform_from_words(block.z, block.w);
  }
};

}  // namespace inkstone::kernels
