// bfloat16 values in code that nvcc compiles without libtorch (docs/kernels.md): a bf16 is the upper half of a
// float's bits, read by widening and written by rounding to nearest even, as c10::BFloat16 does.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/kernels/host_device.h"

namespace inkstone::kernels {

// A bf16 value as its bit pattern (the kernels' stand-in for at::BFloat16, which has the same layout).
struct Bf16Bits {
  uint16_t bits;
};

INKSTONE_HD inline float bits_to_float(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

INKSTONE_HD inline uint32_t float_to_bits(float value) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

// Loads and stores in a kernel's compute precision: float and double pass through, bf16 widens exactly and narrows
// to the nearest even bf16 (a NaN stays a quiet NaN).
INKSTONE_HD inline float to_float(float value) { return value; }
INKSTONE_HD inline float to_float(Bf16Bits value) { return bits_to_float(static_cast<uint32_t>(value.bits) << 16); }

INKSTONE_HD inline Bf16Bits to_bf16(float value) {
  if (value != value) return {0x7FC0};
  const uint32_t bits = float_to_bits(value);
  return {static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16)};
}

// Values in a kernel's compute precision: float for float32 and bf16 (widened exactly, stored rounded to nearest
// even), double for float64.
INKSTONE_HD inline float load(float value) { return value; }
INKSTONE_HD inline float load(Bf16Bits value) { return to_float(value); }
INKSTONE_HD inline double load(double value) { return value; }
INKSTONE_HD inline void store(float* into, float value) { *into = value; }
INKSTONE_HD inline void store(Bf16Bits* into, float value) { *into = to_bf16(value); }
INKSTONE_HD inline void store(double* into, double value) { *into = value; }

}  // namespace inkstone::kernels
