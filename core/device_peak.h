// The dense bf16 matmul peak of a device, the denominator of model FLOPs utilisation (docs/observability.md, "MFU").
#pragma once
#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace inkstone {

// The datasheet's dense (no sparsity) bf16 tensor-core peak of a known CUDA device, in TFLOP/s, by its name (as
// torchtitan does); none for a CPU or an unknown name.
std::optional<double> datasheet_bf16_peak_tflops(c10::Device device);

// The device's name as the driver reports it ("cpu" for the CPU).
std::string device_name(c10::Device device);

// The peak a run divides by: `configured` when positive, else the datasheet's.
std::optional<double> bf16_peak_tflops(c10::Device device, double configured);

}  // namespace inkstone
