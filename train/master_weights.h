// Mixed precision with master weights (Micikevicius et al., "Mixed Precision Training", 2018; docs/training.md,
// "Precision"): the model computes with bf16 weights, and the optimizer steps fp32 copies of them, so that updates
// smaller than half a bf16 step (2^-9 to 2^-8 of the weight) accumulate instead of rounding away. bf16 keeps
// fp32's exponent range, so no loss scaling is needed.
#pragma once
#include <string>
#include <vector>

#include <torch/types.h>

#include "checkpoint/safetensors.h"
#include "train/optimizer.h"

namespace inkstone {

class MasterWeights {
 public:
  // `stepped`: what this rank's optimizer updates. Each tensor not in fp32 gets an fp32 master copy; fp32 ones
  // (an objective's own scalars) are stepped as they are.
  explicit MasterWeights(const NamedTensors& stepped);

  // The tensors the optimizer steps in place of `groups` (a partition of `stepped`): the masters.
  ParameterGroups optimized(const ParameterGroups& groups) const;
  // The stepped tensors in optimizer form, in the order of `stepped`.
  const NamedTensors& optimized() const { return optimized_; }

  // Sets each master to its parameter's value (a run's starting weights).
  void adopt_parameters();
  // Before the optimizer step: each master's gradient is its parameter's, in fp32; the parameter's is dropped.
  void take_gradients();
  // After the step: each parameter is its master rounded to the nearest representable value; masters' gradients
  // are dropped.
  void write_back();

  // The master values as checkpoint entries "<name>.master" (none where a parameter is stepped as it is).
  NamedTensors export_values() const;
  // Restores the masters from those entries; a missing or misshapen one is an InputError naming `origin`.
  void import_values(const NamedTensors& state, const std::string& origin);

 private:
  NamedTensors stepped_;
  NamedTensors optimized_;
  std::vector<bool> has_master_;
};

}  // namespace inkstone
