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

// cuRAND's Philox4_32_10 at the twin's counter: curand_init's offset counts 32-bit outputs, four per block.
struct CurandUniforms {
  uint64_t seed, subsequence;
  uint32_t step;
  __device__ double at(int64_t v) const {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, subsequence, 4 * step_offset(step, static_cast<uint64_t>(v) / 2), &state);
    const uint4 block = curand4(&state);
    return v % 2 == 0 ? uniform_from_words(block.x, block.y) : uniform_from_words(block.z, block.w);
  }
};

}  // namespace inkstone::kernels
