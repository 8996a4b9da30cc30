#include "core/device_peak.h"

#include <array>
#include <utility>

#ifdef INKSTONE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace inkstone {
namespace {

// Name fragments, most specific first (an "H100 PCIe" must not match the SXM part's "H100"); NVIDIA's datasheets,
// dense bf16 with fp32 accumulation.
constexpr std::array<std::pair<const char*, double>, 9> kPeaks = {{
    {"H100 PCIe", 756.0},
    {"H100 NVL", 835.0},
    {"H100", 989.4},  // SXM
    {"H200", 989.4},
    {"H20", 148.0},
    {"B200", 2250.0},
    {"A100", 312.0},
    {"L40S", 362.0},
    {"A10G", 70.0},
}};

}  // namespace

std::string device_name(c10::Device device) {
#ifdef INKSTONE_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name;
#endif
  return device.str();
}

std::optional<double> datasheet_bf16_peak_tflops(c10::Device device) {
  if (!device.is_cuda()) return std::nullopt;
  const std::string name = device_name(device);
  for (const auto& [fragment, tflops] : kPeaks)
    if (name.find(fragment) != std::string::npos) return tflops;
  return std::nullopt;
}

std::optional<double> bf16_peak_tflops(c10::Device device, double configured) {
  if (configured > 0) return configured;
  return datasheet_bf16_peak_tflops(device);
}

}  // namespace inkstone
