#include "bench/kernel_times.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

#include "core/torch_compat.h"

#if INKSTONE_TORCH_AT_LEAST(2, 0) && defined(INKSTONE_CUDA)
#include <torch/csrc/autograd/profiler_kineto.h>
#define INKSTONE_KERNEL_TIMES 1
#endif

namespace inkstone::bench {

#ifdef INKSTONE_KERNEL_TIMES
namespace profiler = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

namespace {
const std::set<impl::ActivityType> kActivities = {impl::ActivityType::CPU, impl::ActivityType::CUDA};
const impl::ProfilerConfig kConfig(impl::ProfilerState::KINETO);
}  // namespace

bool kernel_times_available() { return true; }

void start_kernel_times() {
  profiler::prepareProfiler(kConfig, kActivities);
  profiler::enableProfiler(kConfig, kActivities);
}

nlohmann::json stop_kernel_times(const std::string& trace_path, int64_t top) {
  const auto result = profiler::disableProfiler();
  result->save(trace_path);
  struct Total {
    double ns = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Total> totals;
  double all_ns = 0;
  for (const auto& event : result->events()) {
    if (event.deviceType() != c10::DeviceType::CUDA) continue;
    auto& total = totals[event.name()];
    total.ns += static_cast<double>(event.durationNs());
    total.calls += 1;
    all_ns += static_cast<double>(event.durationNs());
  }
  std::vector<std::pair<std::string, Total>> ranked(totals.begin(), totals.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  nlohmann::json kernels = nlohmann::json::array();
  for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < top; ++i) {
    const auto& [name, total] = ranked[i];
    kernels.push_back({{"name", name.substr(0, 160)},
                       {"ms", total.ns / 1e6},
                       {"calls", total.calls},
                       {"share", all_ns > 0 ? total.ns / all_ns : 0.0}});
  }
  return {{"gpu_ms", all_ns / 1e6}, {"kernels", kernels}};
}
#else
bool kernel_times_available() { return false; }
void start_kernel_times() { throw std::runtime_error("kernel times need libtorch 2.x with CUDA"); }
nlohmann::json stop_kernel_times(const std::string&, int64_t) {
  throw std::runtime_error("kernel times need libtorch 2.x with CUDA");
}
#endif

}  // namespace inkstone::bench
