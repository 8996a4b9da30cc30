// Kernel launches report failure as an exception naming the kernel, so that a bad launch (too many blocks, no
// device image for this GPU) surfaces at its call instead of at the next synchronisation.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace inkstone::kernels {

inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(kernel) + ": kernel launch failed: " + cudaGetErrorString(status));
}

}  // namespace inkstone::kernels
