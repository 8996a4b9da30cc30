// Where a CUDA training step spends its GPU time: per-kernel totals over the timed steps of a benchmark run, from
// libtorch's Kineto profiler, for the MFU work (which kernels to fuse or replace). libtorch 2.x with CUDA only.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace inkstone::bench {

// False where the build cannot record GPU kernels (Debian's CPU libtorch 1.13).
bool kernel_times_available();

// Starts recording CPU ops and GPU kernels.
void start_kernel_times();

// Stops recording; writes the Chrome trace to trace_path and returns the `top` kernels by GPU time:
// {"gpu_ms": total, "kernels": [{"name", "ms", "calls", "share"}, ...]}.
nlohmann::json stop_kernel_times(const std::string& trace_path, int64_t top);

}  // namespace inkstone::bench
