// The CUDA kernel's launchers, declared without libtorch so that nvcc compiles the kernel file alone.
#pragma once
#include <cstdint>

#include "core/kernels/bf16_bits.h"
#include "sampler/kernels/filter_row.h"

namespace inkstone::kernels {

// One block per row (grid-strided), the row code of token_draw_row.h with the block's threads as lanes and
// cuRAND's Philox as the uniforms. `stream` is a cudaStream_t.
void launch_token_draw_f32(const float* logits, const int64_t* sequences, const int64_t* positions, int64_t rows,
                           int64_t vocab, const FilterParams& filter, uint64_t seed, int64_t* tokens,
                           float* log_probs, void* stream);
void launch_token_draw_bf16(const Bf16Bits* logits, const int64_t* sequences, const int64_t* positions, int64_t rows,
                            int64_t vocab, const FilterParams& filter, uint64_t seed, int64_t* tokens,
                            float* log_probs, void* stream);

}  // namespace inkstone::kernels
