// The stream a kernel wrapper launches on (docs/kernels.md): the current CUDA stream of a device, as the
// cudaStream_t that the launchers take through a plain pointer.
#pragma once
#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDAStream.h>
#include <torch/types.h>

namespace inkstone {

inline void* kernel_stream(const torch::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

}  // namespace inkstone
#endif
