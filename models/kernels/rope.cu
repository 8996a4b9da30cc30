// The rotary embedding on the GPU: one thread per coordinate pair, neighbouring threads on neighbouring pairs of a
// row so that both halves are read and written coalesced; the pair code is the CPU twin's (rope_row.h).
#include <cuda_runtime.h>

#include "core/kernels/launch_check.cuh"
#include "models/kernels/rope_cuda.h"

namespace inkstone::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 16;

template <typename T>
__global__ void rope_kernel(const T* x, const float* cos, const float* sin, RopeShape shape, T* out) {
  const int64_t pairs = shape.rows() * shape.half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rope_pair(x, cos, sin, shape, i / shape.half, i % shape.half, out);
}

template <typename T>
void launch(const T* x, const float* cos, const float* sin, const RopeShape& shape, T* out, void* stream) {
  const int64_t pairs = shape.rows() * shape.half;
  if (pairs == 0) return;
  const int64_t wanted = (pairs + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
  rope_kernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, cos, sin, shape, out);
  check_launch("fused rotary embedding");
}

}  // namespace

void launch_rope(const float* x, const float* cos, const float* sin, const RopeShape& shape, float* out, void* stream) {
  launch(x, cos, sin, shape, out, stream);
}
void launch_rope(const Bf16Bits* x, const float* cos, const float* sin, const RopeShape& shape, Bf16Bits* out,
                 void* stream) {
  launch(x, cos, sin, shape, out, stream);
}
void launch_rope(const double* x, const float* cos, const float* sin, const RopeShape& shape, double* out,
                 void* stream) {
  launch(x, cos, sin, shape, out, stream);
}

}  // namespace inkstone::kernels
