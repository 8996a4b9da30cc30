// The CUDA kernel's launchers, declared without libtorch so that nvcc compiles the kernel file alone.
#pragma once
#include <cstdint>

#include "sampler/kernels/diffusion_step_row.h"

namespace inkstone::kernels {

// One block per position (B x L of them, grid-strided), the row code of diffusion_step_row.h with the block's
// threads as lanes and cuRAND's Philox as the uniforms. `stream` is a cudaStream_t.
void launch_diffusion_step_f32(const float* logits, const int64_t* z, const bool* support, const int64_t* sequences,
                               int64_t rows, int64_t length, int64_t vocab, const DiffusionRowParams& params,
                               int64_t* next, void* stream);
void launch_diffusion_step_bf16(const Bf16Bits* logits, const int64_t* z, const bool* support,
                                const int64_t* sequences, int64_t rows, int64_t length, int64_t vocab,
                                const DiffusionRowParams& params, int64_t* next, void* stream);

}  // namespace inkstone::kernels
