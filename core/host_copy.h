// A few numbers of the device on their way to the host without stopping it (docs/training.md, "A step without
// host synchronisation"): on CUDA a non-blocking copy into pinned memory with an event recorded behind it on the
// current stream, read once the event has passed; elsewhere a plain copy.
#pragma once
#include <memory>

#include <torch/types.h>

namespace inkstone {

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

}  // namespace inkstone
