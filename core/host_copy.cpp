#include "core/host_copy.h"

#ifdef INKSTONE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace inkstone {

HostCopy::HostCopy(const torch::Tensor& values) {
#ifdef INKSTONE_CUDA
  if (values.is_cuda()) {
    host_ = torch::empty(values.sizes(), values.options().device(torch::kCPU).pinned_memory(true));
    host_.copy_(values, /*non_blocking=*/true);
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(c10::cuda::getCurrentCUDAStream(values.device().index()));  // behind the copy
    arrival_ = std::move(event);
    return;
  }
#endif
  host_ = values.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

const torch::Tensor& HostCopy::values() {
#ifdef INKSTONE_CUDA
  if (arrival_) {
    static_cast<at::cuda::CUDAEvent*>(arrival_.get())->synchronize();
    arrival_.reset();
  }
#endif
  return host_;
}

torch::Tensor to_device_async(const torch::Tensor& host, torch::Device device) {
  if (!device.is_cuda()) return host.to(device);
  const auto pinned = torch::empty(host.sizes(), host.options().pinned_memory(true)).copy_(host);
  return pinned.to(device, /*non_blocking=*/true);
}

}  // namespace inkstone
