// Where a kernel wrapper launches (docs/kernels.md): on its tensors' device, made current for the launch (a launch
// runs on the current device, and a process may work on another one than device 0: `--device cuda:1`), in that
// device's current stream, which the launchers take as a plain pointer to a cudaStream_t.
#pragma once
#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/types.h>

namespace inkstone {

// Made as a temporary among the launch call's arguments, it keeps the device current until the call returns:
// `launch_x(..., KernelPlace(x.device()).stream())`.
class KernelPlace {
 public:
  explicit KernelPlace(const torch::Device& device)
      : guard_(device), stream_(c10::cuda::getCurrentCUDAStream(device.index()).stream()) {}
  void* stream() const { return stream_; }

 private:
  c10::cuda::CUDAGuard guard_;
  void* stream_;
};

}  // namespace inkstone
#endif
