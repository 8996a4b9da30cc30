// A thread block's sum for the kernels' lanes (docs/kernels.md): every thread passes its partial and gets the
// block's total. `buffer` is shared memory of blockDim.x doubles; blockDim.x must be a power of two. Every thread
// of the block must call it.
#pragma once

namespace inkstone::kernels {

__device__ inline double block_sum(double* buffer, double value) {
  buffer[threadIdx.x] = value;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) buffer[threadIdx.x] += buffer[threadIdx.x + half];
    __syncthreads();
  }
  const double total = buffer[0];
  __syncthreads();
  return total;
}

}  // namespace inkstone::kernels
