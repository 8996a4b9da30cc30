// Diffusion time t for training and evaluation (docs/diffusion.md, "Time sampling"): stratified over the whole
// step batch, so that accumulation and data parallelism leave the t-distribution unchanged; never t = 0
// (docs/diffusion.md, "Pitfalls").
#pragma once
#include <cstdint>

#include <torch/types.h>

#include "config/config.h"

namespace inkstone {

// u_k = ((U_k + first + k) / total) mod 1 for k < count, U_k ~ U[0, 1) from the default generator: draw k of a
// batch of `total` lands in stratum [(first + k)/total, (first + k + 1)/total). [count] float64 on `device`.
torch::Tensor stratified_uniform(int64_t first, int64_t count, int64_t total, torch::Device device);

// Whether each of rows [first_row, first_row + rows) of a step batch draws a t per token under
// diffusion.time_mix = f: row r does iff ⌊(r + 1) f⌋ > ⌊r f⌋, so every prefix of the batch holds ⌊n f⌋ such rows
// and the choice does not depend on how the batch is split over ranks or micro-batches. [rows] bool on `device`.
torch::Tensor per_token_time_rows(double time_mix, int64_t first_row, int64_t rows, torch::Device device);

// Training times float32 on `device` for windows of L tokens, [rows, 1] with time_mix = 0, else [rows, L]: a row
// draws one t for all its tokens, or
// (per_token_time_rows) one per token (Sumi's time mix; docs/diffusion.md, "Time sampling"). The rows are rows
// [first_row, first_row + rows) of a step batch of total_rows (0: these rows are the batch); t = t_min +
// (1 − t_min) u with u stratified over the total_rows sequence draws and, separately, over the total_rows · L
// token draws, or iid.
torch::Tensor sample_training_time(const DiffusionConfig& config, int64_t rows, int64_t length, int64_t first_row,
                                   int64_t total_rows, torch::Device device);

// Block diffusion: times drawn for rows · (L / block) blocks as [rows · blocks, 1 or block], laid out as
// [rows, L] (block j of row r is draw r · blocks + j).
torch::Tensor per_block_times(const torch::Tensor& block_times, int64_t rows, int64_t length);

// The fixed evaluation grid [rows, 1] float32 on the CPU: t_i = t_min + (1 − t_min)(i + ½)/rows, so that one
// checkpoint always gives the same numbers.
torch::Tensor eval_time_grid(double t_min, int64_t rows);

}  // namespace inkstone
