// The SwiGLU kernel's launchers, declared without libtorch so that nvcc compiles the kernel file alone.
#pragma once
#include "models/kernels/swiglu_row.h"

namespace inkstone::kernels {

// One thread per hidden coordinate (grid-strided); `stream` is a cudaStream_t.
void launch_swiglu_forward(const float* gate_up, const SwigluShape& shape, float* hidden, void* stream);
void launch_swiglu_forward(const Bf16Bits* gate_up, const SwigluShape& shape, Bf16Bits* hidden, void* stream);
void launch_swiglu_forward(const double* gate_up, const SwigluShape& shape, double* hidden, void* stream);
void launch_swiglu_backward(const float* gate_up, const float* grad_hidden, const SwigluShape& shape,
                            float* grad_gate_up, void* stream);
void launch_swiglu_backward(const Bf16Bits* gate_up, const Bf16Bits* grad_hidden, const SwigluShape& shape,
                            Bf16Bits* grad_gate_up, void* stream);
void launch_swiglu_backward(const double* gate_up, const double* grad_hidden, const SwigluShape& shape,
                            double* grad_gate_up, void* stream);

}  // namespace inkstone::kernels
