#include "core/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <atomic>
#include <memory>

#include "core/memory_usage.h"
#include "core/torch_compat.h"

namespace inkstone {
namespace {

// libtorch's CPU allocator calls reportMemoryUsage on every allocation (size > 0) and free (size < 0) while an
// observer that says it is profiling is registered in the thread's debug info.
class TensorMemoryObserver : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void*, int64_t alloc_size, compat::AllocatorTotal, compat::AllocatorTotal,
                         c10::Device device) override {
    if (device.type() != c10::DeviceType::CPU) return;
    const int64_t now = live_.fetch_add(alloc_size) + alloc_size;
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

std::shared_ptr<TensorMemoryObserver>& observer() {
  static std::shared_ptr<TensorMemoryObserver> instance;
  return instance;
}

}  // namespace

void count_cpu_tensor_memory() {
  if (observer()) return;
  observer() = std::make_shared<TensorMemoryObserver>();
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, observer());
}

bool counting_cpu_tensor_memory() { return observer() != nullptr; }

double cpu_tensor_live_mib() { return observer() ? static_cast<double>(observer()->live()) / kMiB : 0.0; }
double cpu_tensor_peak_mib() { return observer() ? static_cast<double>(observer()->peak()) / kMiB : 0.0; }
void reset_cpu_tensor_peak() {
  if (observer()) observer()->reset_peak();
}

}  // namespace inkstone
