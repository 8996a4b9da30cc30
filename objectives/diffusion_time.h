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

// Training times [rows, cols] float32 on `device`: cols = 1 gives one t per sequence, cols = L one per token.
// The rows are rows [first_row, first_row + rows) of a step batch of total_rows (0: these rows are the batch);
// t = t_min + (1 − t_min) u with u stratified over all total_rows · cols draws, or iid.
torch::Tensor sample_training_time(const DiffusionConfig& config, int64_t rows, int64_t cols, int64_t first_row,
                                   int64_t total_rows, torch::Device device);

// The fixed evaluation grid [rows, 1] float32 on the CPU: t_i = t_min + (1 − t_min)(i + ½)/rows, so that one
// checkpoint always gives the same numbers.
torch::Tensor eval_time_grid(double t_min, int64_t rows);

}  // namespace inkstone
