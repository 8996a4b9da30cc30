#include "checkpoint/weight_distance.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <map>

#include "core/errors.h"

namespace inkstone {

WeightDistance weight_distance(const NamedTensors& a, const NamedTensors& b) {
  std::map<std::string, torch::Tensor> by_name(b.begin(), b.end());
  if (a.size() != b.size())
    throw InputError(fmt::format("the checkpoints hold {} and {} weight tensors", a.size(), b.size()));
  WeightDistance d;
  double squared = 0, squared_a = 0, squared_b = 0;
  for (const auto& [name, left] : a) {
    const auto found = by_name.find(name);
    if (found == by_name.end()) throw InputError(fmt::format("weight '{}' is in the first checkpoint only", name));
    const auto& right = found->second;
    if (!left.sizes().equals(right.sizes()))
      throw InputError(fmt::format("weight '{}' is {} in one checkpoint and {} in the other", name,
                                   fmt::join(left.sizes(), "x"), fmt::join(right.sizes(), "x")));
    const auto x = left.to(torch::kDouble), y = right.to(torch::kDouble);
    squared += (x - y).square().sum().item<double>();
    squared_a += x.square().sum().item<double>();
    squared_b += y.square().sum().item<double>();
    ++d.tensors;
    if (!left.equal(right)) ++d.differing_tensors;
  }
  d.distance = std::sqrt(squared);
  d.norm_a = std::sqrt(squared_a);
  d.norm_b = std::sqrt(squared_b);
  return d;
}

}  // namespace inkstone
