// The routing read on the GPU: one block per token position, its threads striding over the width, the row code
// shared with the CPU twin (route_sources_row.h). Per-head sums and the dq / dg totals use atomic float64 adds.
#include <cuda_runtime.h>

#include "core/kernels/block_sum.cuh"
#include "core/kernels/launch_check.cuh"
#include "models/kernels/route_sources_cuda.h"

namespace inkstone::kernels {
namespace {

constexpr int kThreads = 256;  // a power of two: the sum halves it
constexpr int64_t kMaxBlocks = 65535 * 16;

struct BlockRouteLanes {
  double* reduce;  // [kThreads]
  __device__ int64_t first() const { return threadIdx.x; }
  __device__ int64_t stride() const { return blockDim.x; }
  __device__ void barrier() const { __syncthreads(); }
  __device__ void accumulate(double* into, int64_t index, double value) const { atomicAdd(into + index, value); }
  __device__ double sum(double value) const { return block_sum(reduce, value); }
};

// Dynamic shared memory: the reduction buffer, then the row scratch (3 S H + S doubles).
__device__ RouteScratch scratch_in(double* shared, const RouteShape& shape) {
  double* base = shared + kThreads;
  const int64_t block = shape.sources * shape.heads;
  return {base, base + block, base + 2 * block, base + 3 * block};
}

size_t shared_bytes(const RouteShape& shape) {
  return sizeof(double) * (kThreads + 3 * shape.sources * shape.heads + shape.sources);
}

// Past 48 KiB a kernel's dynamic shared memory must be asked for, up to the device's opt-in limit (227 KiB on
// H100 / H200): many sources and heads (S·(3H + 1) > 5,888 doubles) need it. A refusal shows as the launch's error.
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

unsigned blocks_for(const RouteShape& shape) {
  return static_cast<unsigned>(shape.positions < kMaxBlocks ? shape.positions : kMaxBlocks);
}

template <typename T>
__global__ void route_forward_kernel(const T* const* sources, const T* query, const T* gain, RouteShape shape, T* out,
                                     double* weights, double* inv_rms) {
  extern __shared__ double shared[];
  BlockRouteLanes lanes{shared};
  const RouteScratch scratch = scratch_in(shared, shape);
  for (int64_t p = blockIdx.x; p < shape.positions; p += gridDim.x)
    route_forward_row(sources, query, gain, shape, p, out + p * shape.width, weights + p * shape.sources * shape.heads,
                      inv_rms + p * shape.sources, scratch, lanes);
}

template <typename T>
__global__ void route_backward_kernel(const T* const* sources, const T* query, const T* gain, const T* grad_out,
                                      RouteShape shape, const double* weights, const double* inv_rms,
                                      T* const* grad_sources, double* grad_query, double* grad_gain) {
  extern __shared__ double shared[];
  BlockRouteLanes lanes{shared};
  const RouteScratch scratch = scratch_in(shared, shape);
  for (int64_t p = blockIdx.x; p < shape.positions; p += gridDim.x)
    route_backward_row(sources, query, gain, grad_out, shape, p, weights + p * shape.sources * shape.heads,
                       inv_rms + p * shape.sources, grad_sources, grad_query, grad_gain, scratch, lanes);
}

template <typename T>
void forward(const T* const* sources, const T* query, const T* gain, const RouteShape& shape, T* out, double* weights,
             double* inv_rms, void* stream) {
  if (shape.positions == 0) return;
  allow_shared_bytes(route_forward_kernel<T>, shared_bytes(shape));
  route_forward_kernel<T><<<blocks_for(shape), kThreads, shared_bytes(shape), static_cast<cudaStream_t>(stream)>>>(
      sources, query, gain, shape, out, weights, inv_rms);
  check_launch("fused routing forward");
}

template <typename T>
void backward(const T* const* sources, const T* query, const T* gain, const T* grad_out, const RouteShape& shape,
              const double* weights, const double* inv_rms, T* const* grad_sources, double* grad_query, double* grad_gain,
              void* stream) {
  if (shape.positions == 0) return;
  allow_shared_bytes(route_backward_kernel<T>, shared_bytes(shape));
  route_backward_kernel<T><<<blocks_for(shape), kThreads, shared_bytes(shape), static_cast<cudaStream_t>(stream)>>>(
      sources, query, gain, grad_out, shape, weights, inv_rms, grad_sources, grad_query, grad_gain);
  check_launch("fused routing backward");
}

}  // namespace

void launch_route_forward(const float* const* sources, const float* query, const float* gain, const RouteShape& shape,
                          float* out, double* weights, double* inv_rms, void* stream) {
  forward(sources, query, gain, shape, out, weights, inv_rms, stream);
}
void launch_route_forward(const double* const* sources, const double* query, const double* gain, const RouteShape& shape,
                          double* out, double* weights, double* inv_rms, void* stream) {
  forward(sources, query, gain, shape, out, weights, inv_rms, stream);
}
void launch_route_backward(const float* const* sources, const float* query, const float* gain, const float* grad_out,
                           const RouteShape& shape, const double* weights, const double* inv_rms,
                           float* const* grad_sources, double* grad_query, double* grad_gain, void* stream) {
  backward(sources, query, gain, grad_out, shape, weights, inv_rms, grad_sources, grad_query, grad_gain, stream);
}
void launch_route_backward(const double* const* sources, const double* query, const double* gain, const double* grad_out,
                           const RouteShape& shape, const double* weights, const double* inv_rms,
                           double* const* grad_sources, double* grad_query, double* grad_gain, void* stream) {
  backward(sources, query, gain, grad_out, shape, weights, inv_rms, grad_sources, grad_query, grad_gain, stream);
}

}  // namespace inkstone::kernels
