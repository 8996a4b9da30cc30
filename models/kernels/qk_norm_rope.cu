// The QK-norm and rotary embedding on the GPU: one warp per head row, its 32 lanes on neighbouring coordinate pairs
// (coalesced reads of both halves), the row sums by warp shuffles; the row code is the CPU twin's
// (qk_norm_rope_row.h). The weight gradient: one warp per chunk of rows, each lane summing its own coordinates in
// shared memory, one partial row per chunk.
#include <cuda_runtime.h>

#include "core/kernels/launch_check.cuh"
#include "models/kernels/qk_norm_rope_cuda.h"

namespace inkstone::kernels {
namespace {

constexpr int kLanes = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int64_t kMaxBlocks = 65535 * 16;
constexpr int kMaxWidth = kQkNormRopeMaxWidth;

template <typename Compute>
__device__ Compute warp_sum(Compute value) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ int64_t warp_index() { return blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kLanes; }

template <typename T, typename Compute>
__global__ void forward_kernel(const T* x, const Compute* g, const float* cos, const float* sin, QkNormRopeShape shape,
                               T* y, Compute* r_out) {
  const int lane = threadIdx.x % kLanes;
  for (int64_t row = warp_index(); row < shape.rows(); row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const RowPlace p = place_of(shape, row);
    const T* x_row = x + offset(shape.x, p);
    const int64_t table = offset(shape.table, p);
    const Compute r = inverse_rms(warp_sum(sum_of_squares_part(x_row, shape, lane, kLanes)), shape.width(), shape.eps);
    norm_rope_pairs(x_row, g, cos + table, sin + table, r, shape, lane, kLanes, y + offset(shape.out, p));
    if (lane == 0) r_out[row] = r;
  }
}

template <typename T, typename Compute>
__global__ void backward_kernel(const T* x, const T* dy, const Compute* g, const float* cos, const float* sin,
                                const Compute* r_in, QkNormRopeShape shape, T* dx, Compute* dg_partial) {
  __shared__ Compute dg_of_warp[kWarpsPerBlock][kMaxWidth];
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const int64_t chunk = warp_index();
  if (chunk >= gradient_chunks(shape)) return;
  Compute* dg = dg_of_warp[warp];
  for (int64_t j = lane; j < shape.width(); j += kLanes) dg[j] = 0;
  const int64_t begin = chunk * rows_per_chunk(shape);
  const int64_t end = begin + rows_per_chunk(shape) < shape.rows() ? begin + rows_per_chunk(shape) : shape.rows();
  for (int64_t row = begin; row < end; ++row) {
    const RowPlace p = place_of(shape, row);
    const T* x_row = x + offset(shape.x, p);
    const T* dy_row = dy + offset(shape.grad, p);
    const int64_t table = offset(shape.table, p);
    const Compute dot = warp_sum(gradient_dot_part(x_row, dy_row, g, cos + table, sin + table, shape, lane, kLanes));
    norm_rope_gradient_pairs(x_row, dy_row, g, cos + table, sin + table, r_in[row], dot, shape, lane, kLanes,
                             dx + offset(shape.grad_x, p), dg);
  }
  for (int64_t j = lane; j < shape.width(); j += kLanes) dg_partial[chunk * shape.width() + j] = dg[j];
}

unsigned blocks_for(int64_t warps) {
  const int64_t wanted = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return static_cast<unsigned>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
}

template <typename T, typename Compute>
void forward(const T* x, const Compute* g, const float* cos, const float* sin, const QkNormRopeShape& shape, T* y,
             Compute* r, void* stream) {
  if (shape.rows() == 0) return;
  forward_kernel<<<blocks_for(shape.rows()), kWarpsPerBlock * kLanes, 0, static_cast<cudaStream_t>(stream)>>>(
      x, g, cos, sin, shape, y, r);
  check_launch("fused QK-norm and rotary embedding");
}

template <typename T, typename Compute>
void backward(const T* x, const T* dy, const Compute* g, const float* cos, const float* sin, const Compute* r,
              const QkNormRopeShape& shape, T* dx, Compute* dg_partial, void* stream) {
  if (shape.rows() == 0) return;
  // Every chunk's warp is launched at once (at most 1,024 chunks): a warp keeps its chunk's partial to the end.
  backward_kernel<<<blocks_for(gradient_chunks(shape)), kWarpsPerBlock * kLanes, 0,
                    static_cast<cudaStream_t>(stream)>>>(x, dy, g, cos, sin, r, shape, dx, dg_partial);
  check_launch("fused QK-norm and rotary embedding backward");
}

}  // namespace

#define INKSTONE_QK_NORM_ROPE_LAUNCHERS(T, Compute)                                                                \
  void launch_qk_norm_rope(const T* x, const Compute* g, const float* cos, const float* sin,                      \
                           const QkNormRopeShape& shape, T* y, Compute* r, void* stream) {                         \
    forward(x, g, cos, sin, shape, y, r, stream);                                                                  \
  }                                                                                                                \
  void launch_qk_norm_rope_backward(const T* x, const T* dy, const Compute* g, const float* cos, const float* sin, \
                                    const Compute* r, const QkNormRopeShape& shape, T* dx, Compute* dg_partial,     \
                                    void* stream) {                                                                \
    backward(x, dy, g, cos, sin, r, shape, dx, dg_partial, stream);                                                \
  }
INKSTONE_QK_NORM_ROPE_LAUNCHERS(float, float)
INKSTONE_QK_NORM_ROPE_LAUNCHERS(Bf16Bits, float)
INKSTONE_QK_NORM_ROPE_LAUNCHERS(double, double)
#undef INKSTONE_QK_NORM_ROPE_LAUNCHERS

}  // namespace inkstone::kernels
