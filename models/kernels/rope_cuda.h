// The rotary embedding kernel's launchers, declared without libtorch so that nvcc compiles the kernel file alone.
#pragma once
#include "models/kernels/rope_row.h"

namespace inkstone::kernels {

// One thread per coordinate pair (grid-strided); cos, sin: the float32 tables at shape.table's strides; `stream`
// is a cudaStream_t.
void launch_rope(const float* x, const float* cos, const float* sin, const RopeShape& shape, float* out, void* stream);
void launch_rope(const Bf16Bits* x, const float* cos, const float* sin, const RopeShape& shape, Bf16Bits* out,
                 void* stream);
void launch_rope(const double* x, const float* cos, const float* sin, const RopeShape& shape, double* out,
                 void* stream);

}  // namespace inkstone::kernels
