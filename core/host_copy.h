// Copies between the host and the device that do not stop the device (docs/training.md, "A step without host
// synchronisation"). A plain copy does: libtorch waits for the stream to drain after a blocking copy either way.
#pragma once
#include <memory>

#include <torch/types.h>

namespace inkstone {

// A few numbers of the device on their way to the host: on CUDA a non-blocking copy into pinned memory with an
// event recorded behind it on the current stream, read once the event has passed; elsewhere a plain copy.
class HostCopy {
 public:
  HostCopy() = default;
  // Starts copying `values` (any device) to the host.
  explicit HostCopy(const torch::Tensor& values);
  // The values on the host, waiting for the copy if it is still under way.
  const torch::Tensor& values();

 private:
  torch::Tensor host_;
  std::shared_ptr<void> arrival_;  // CUDA: the event recorded behind the copy; null once passed or elsewhere
};

// `host` (a CPU tensor) on `device`: on CUDA staged through pinned memory and copied behind the work already queued
// on the current stream, without waiting (the caching host allocator keeps the pinned block until the copy has
// run); elsewhere a plain copy.
torch::Tensor to_device_async(const torch::Tensor& host, torch::Device device);

}  // namespace inkstone
