// A batch of token windows on the training device, and a source of evaluation batches.
#pragma once
#include <cstdint>

#include <torch/types.h>

namespace inkstone {

struct Batch {
  torch::Tensor tokens;  // [B, W] int64
  torch::Tensor real;    // [B, W] bool: false at padding
  // Where these rows sit in the whole optimizer-step batch (micro-batches of one step share it), so that an
  // objective stratifying over the batch (diffusion time) sees the same strata for any accumulation split.
  int64_t first_row = 0;
  int64_t total_rows = 0;  // 0: these rows are the whole batch
};

// The validation split as a fixed sequence of batches, so one checkpoint always gives the same numbers.
class EvalSource {
 public:
  virtual ~EvalSource() = default;
  virtual int64_t num_batches() const = 0;
  virtual Batch batch(int64_t index) const = 0;
  // Average UTF-8 bytes per token over the split, for bits per byte.
  virtual double bytes_per_token() const = 0;
};

}  // namespace inkstone
