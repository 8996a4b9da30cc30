// SwiGLU on the GPU: one thread per hidden coordinate, neighbouring threads on neighbouring coordinates of a row so
// that the gate half, the up half and the output are each read or written coalesced; the coordinate code is the CPU
// twin's (swiglu_row.h).
#include <cuda_runtime.h>

#include "core/kernels/launch_check.cuh"
#include "models/kernels/swiglu_cuda.h"

namespace inkstone::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 16;

template <typename T>
__global__ void forward_kernel(const T* gate_up, SwigluShape shape, T* hidden) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < shape.elements();
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    swiglu_forward_at(gate_up, shape, i, hidden);
}

template <typename T>
__global__ void backward_kernel(const T* gate_up, const T* grad_hidden, SwigluShape shape, T* grad_gate_up) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < shape.elements();
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    swiglu_backward_at(gate_up, grad_hidden, shape, i, grad_gate_up);
}

unsigned blocks_for(const SwigluShape& shape) {
  const int64_t wanted = (shape.elements() + kThreads - 1) / kThreads;
  return static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
}

template <typename T>
void forward(const T* gate_up, const SwigluShape& shape, T* hidden, void* stream) {
  if (shape.elements() == 0) return;
  forward_kernel<T><<<blocks_for(shape), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate_up, shape, hidden);
  check_launch("fused SwiGLU");
}

template <typename T>
void backward(const T* gate_up, const T* grad_hidden, const SwigluShape& shape, T* grad_gate_up, void* stream) {
  if (shape.elements() == 0) return;
  backward_kernel<T><<<blocks_for(shape), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate_up, grad_hidden,
                                                                                            shape, grad_gate_up);
  check_launch("fused SwiGLU backward");
}

}  // namespace

void launch_swiglu_forward(const float* gate_up, const SwigluShape& shape, float* hidden, void* stream) {
  forward(gate_up, shape, hidden, stream);
}
void launch_swiglu_forward(const Bf16Bits* gate_up, const SwigluShape& shape, Bf16Bits* hidden, void* stream) {
  forward(gate_up, shape, hidden, stream);
}
void launch_swiglu_forward(const double* gate_up, const SwigluShape& shape, double* hidden, void* stream) {
  forward(gate_up, shape, hidden, stream);
}
void launch_swiglu_backward(const float* gate_up, const float* grad_hidden, const SwigluShape& shape,
                            float* grad_gate_up, void* stream) {
  backward(gate_up, grad_hidden, shape, grad_gate_up, stream);
}
void launch_swiglu_backward(const Bf16Bits* gate_up, const Bf16Bits* grad_hidden, const SwigluShape& shape,
                            Bf16Bits* grad_gate_up, void* stream) {
  backward(gate_up, grad_hidden, shape, grad_gate_up, stream);
}
void launch_swiglu_backward(const double* gate_up, const double* grad_hidden, const SwigluShape& shape,
                            double* grad_gate_up, void* stream) {
  backward(gate_up, grad_hidden, shape, grad_gate_up, stream);
}

}  // namespace inkstone::kernels
