// The fused diffusion sampling step (sampler/kernels/diffusion_step_row.h) over a batch: on the CPU by the row
// code itself, on a GPU by the CUDA kernel that runs the same row code (docs/kernels.md).
#pragma once
#include <torch/types.h>

#include "sampler/kernels/diffusion_step_row.h"

namespace inkstone {

// logits: [B, L, V] float32 or bfloat16; z: [B, L] int64; support: [V] bool; sequences: [B] int64, each row's
// global sequence number (its random stream, so a row draws the same tokens in any batch). All on one device.
// Returns the next z, [B, L] int64 on that device.
torch::Tensor fused_diffusion_step(const torch::Tensor& logits, const torch::Tensor& z, const torch::Tensor& support,
                                   const torch::Tensor& sequences, const kernels::DiffusionRowParams& params);

// The prior's draws at every position, from the same counter-based streams as the steps (step number
// kPriorStep): the mask with probability mask_share (one uniform of the position's Philox block), else a uniform
// draw from the support (the other): [B, L] int64 on the CPU. mask_share = 0 gives uniform noise's prior.
inline constexpr uint32_t kPriorStep = 0xFFFFFFFFu;
torch::Tensor keyed_prior_tokens(const torch::Tensor& support, const torch::Tensor& sequences, int64_t length,
                                 uint64_t seed, double mask_share, int64_t mask_id);

}  // namespace inkstone
