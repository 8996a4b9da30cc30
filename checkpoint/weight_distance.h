// How far apart two checkpoints' weights are (docs/sweeps.md, "Twin runs"): the Euclidean distance over all
// weights, the yardstick of a counterfactual twin against the distance between two seeds.
#pragma once
#include <cstdint>

#include "checkpoint/safetensors.h"

namespace inkstone {

struct WeightDistance {
  double distance = 0;  // ‖a − b‖ over every weight, float64
  double norm_a = 0;    // ‖a‖
  double norm_b = 0;    // ‖b‖
  int64_t tensors = 0;
  int64_t differing_tensors = 0;  // tensors not bitwise equal
};

// InputError naming the first tensor one side lacks or whose shape differs.
WeightDistance weight_distance(const NamedTensors& a, const NamedTensors& b);

}  // namespace inkstone
