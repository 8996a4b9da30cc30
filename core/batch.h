// A batch of token windows on the training device, and a source of evaluation batches.
#pragma once
#include <cstdint>

#include <torch/types.h>

namespace inkstone {

struct Batch {
  torch::Tensor tokens;  // [B, W] int64
  torch::Tensor real;    // [B, W] bool: false at padding
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
