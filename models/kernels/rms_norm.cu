// RMSNorm on the GPU: one thread block per row, its threads on neighbouring coordinates (coalesced), the row sums by
// a block tree in double; the weight gradient by chunks of consecutive rows, one block each, each thread summing its
// own coordinates into the chunk's partial row. The coordinate code is the CPU op's (rms_norm_row.h). Fused with the
// residual add, a thread stores h_j and reads it back itself, so no barrier is needed between the sum and the norm.
#include <cuda_runtime.h>

#include "core/kernels/block_sum.cuh"
#include "core/kernels/launch_check.cuh"
#include "models/kernels/rms_norm_cuda.h"

namespace inkstone::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 16;

template <typename T, typename Compute>
__global__ void forward_kernel(const T* x, const T* o, T* h, const T* g, RmsNormShape shape, T* y, Compute* r_out) {
  __shared__ double reduce[kThreads];
  for (int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {
    const T* x_row = x + row * shape.width;
    if (o) {
      T* h_row = h + row * shape.width;
      const T* o_row = o + row * shape.width;
      for (int64_t j = threadIdx.x; j < shape.width; j += blockDim.x) residual_sum_at(x_row, o_row, j, h_row);
      x_row = h_row;
    }
    double part = 0;
    for (int64_t j = threadIdx.x; j < shape.width; j += blockDim.x) part += square_of(x_row, j);
    const double total = block_sum(reduce, part);
    const auto r = static_cast<Compute>(inverse_rms(total, shape.width, shape.eps));
    for (int64_t j = threadIdx.x; j < shape.width; j += blockDim.x) normalise_at(x_row, g, r, j, y + row * shape.width);
    if (threadIdx.x == 0) r_out[row] = r;
  }
}

template <typename T, typename Compute>
__global__ void backward_kernel(const T* x, const T* dy, const T* g, const Compute* r_in, const T* dh,
                                RmsNormShape shape, int64_t rows_per_chunk, T* dx, Compute* dg_partial) {
  __shared__ double reduce[kThreads];
  const int64_t begin = blockIdx.x * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < shape.rows ? begin + rows_per_chunk : shape.rows;
  Compute* dg = dg_partial + blockIdx.x * shape.width;
  for (int64_t row = begin; row < end; ++row) {
    const T* x_row = x + row * shape.width;
    const T* dy_row = dy + row * shape.width;
    const Compute r = r_in[row];
    double part = 0;
    for (int64_t j = threadIdx.x; j < shape.width; j += blockDim.x) part += gradient_dot_term(x_row, dy_row, g, j);
    const auto coefficient =
        static_cast<Compute>(block_sum(reduce, part) * r * r * r / static_cast<double>(shape.width));
    for (int64_t j = threadIdx.x; j < shape.width; j += blockDim.x) {
      input_gradient_at(x_row, dy_row, g, r, coefficient, dh ? dh + row * shape.width : nullptr, j,
                        dx + row * shape.width);
      dg[j] += gain_gradient_term(x_row, dy_row, r, j);
    }
  }
}

int64_t chunks_for(const RmsNormShape& shape) {
  return shape.rows < kRmsNormGradientChunksOnGpu ? shape.rows : kRmsNormGradientChunksOnGpu;
}

template <typename T, typename Compute>
void forward(const T* x, const T* o, T* h, const T* g, const RmsNormShape& shape, T* y, Compute* r, void* stream) {
  if (shape.rows == 0) return;
  const auto blocks = static_cast<unsigned>(shape.rows < kMaxBlocks ? shape.rows : kMaxBlocks);
  forward_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, o, h, g, shape, y, r);
  check_launch("RMSNorm");
}

template <typename T, typename Compute>
void backward(const T* x, const T* dy, const T* g, const Compute* r, const T* dh, const RmsNormShape& shape, T* dx,
              Compute* dg_partial, void* stream) {
  if (shape.rows == 0) return;
  const int64_t chunks = chunks_for(shape);
  backward_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, dy, g, r, dh, shape, (shape.rows + chunks - 1) / chunks, dx, dg_partial);
  check_launch("RMSNorm backward");
}

}  // namespace

#define INKSTONE_RMS_NORM_LAUNCHERS(T, Compute)                                                                   \
  void launch_rms_norm(const T* x, const T* o, T* h, const T* g, const RmsNormShape& shape, T* y, Compute* r,     \
                       void* stream) {                                                                            \
    forward(x, o, h, g, shape, y, r, stream);                                                                     \
  }                                                                                                               \
  void launch_rms_norm_backward(const T* x, const T* dy, const T* g, const Compute* r, const T* dh,               \
                                const RmsNormShape& shape, T* dx, Compute* dg_partial, void* stream) {            \
    backward(x, dy, g, r, dh, shape, dx, dg_partial, stream);                                                     \
  }
INKSTONE_RMS_NORM_LAUNCHERS(float, float)
INKSTONE_RMS_NORM_LAUNCHERS(Bf16Bits, float)
INKSTONE_RMS_NORM_LAUNCHERS(double, double)
#undef INKSTONE_RMS_NORM_LAUNCHERS

}  // namespace inkstone::kernels
