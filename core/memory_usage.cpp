#include "core/memory_usage.h"

#include <sys/resource.h>

#ifdef INKSTONE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace inkstone {
namespace {

#ifdef INKSTONE_CUDA
// A config's "cuda" names no index and means the current device; the allocator wants a real index (-1 is refused).
c10::DeviceIndex allocator_index(c10::Device device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
#endif

}  // namespace

double peak_resident_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

std::optional<CudaMemory> cuda_memory(c10::Device device) {
#ifdef INKSTONE_CUDA
  if (!device.is_cuda()) return std::nullopt;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(allocator_index(device));
  constexpr size_t kAll = 0;  // StatType::AGGREGATE, whose namespace moved between libtorch versions
  return CudaMemory{static_cast<double>(stats.allocated_bytes[kAll].peak) / kMiB,
                    static_cast<double>(stats.reserved_bytes[kAll].current) / kMiB};
#else
  (void)device;
  return std::nullopt;
#endif
}

void reset_cuda_peak(c10::Device device) {
#ifdef INKSTONE_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(allocator_index(device));
#else
  (void)device;
#endif
}

}  // namespace inkstone
