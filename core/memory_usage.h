// Memory a run can see: the process's peak resident set (CPU) and the CUDA caching allocator's peak and reserved
// bytes on a device, for the metrics (train/session.cpp) and the import's report.
#pragma once
#include <optional>

#include <c10/core/Device.h>

namespace inkstone {

inline constexpr double kMiB = 1024.0 * 1024.0;  // the unit every memory figure is reported in

// The largest resident set this process has had, in MiB (getrusage; Linux reports KiB).
double peak_resident_mib();

struct CudaMemory {
  double max_allocated_mib = 0;  // since the last reset_cuda_peak (or the start)
  double reserved_mib = 0;       // held by the caching allocator now
};
// Nothing for a CPU device or a build without CUDA.
std::optional<CudaMemory> cuda_memory(c10::Device device);
void reset_cuda_peak(c10::Device device);

}  // namespace inkstone
