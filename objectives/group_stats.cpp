#include "objectives/group_stats.h"

#include <limits>

namespace inkstone {

RolloutGroups::RolloutGroups(const torch::Tensor& group_ids) {
  auto unique = torch::unique_consecutive(group_ids, /*return_inverse=*/true, /*return_counts=*/true);
  index_ = std::get<1>(unique);
  sizes_ = std::get<2>(unique);
  count_ = sizes_.size(0);
}

torch::Tensor RolloutGroups::sums(const torch::Tensor& values) const {
  return torch::zeros({count_}, values.options()).index_add_(0, index_, values);
}

torch::Tensor RolloutGroups::mean(const torch::Tensor& values) const {
  return broadcast(sums(values) / sizes_.to(values.scalar_type()));
}

torch::Tensor RolloutGroups::std(const torch::Tensor& values) const {
  const auto centred = values - mean(values);
  const auto variance = sums(centred * centred) / (sizes_ - 1).clamp_min(1).to(values.scalar_type());
  return broadcast(variance.sqrt());
}

torch::Tensor RolloutGroups::varies(const torch::Tensor& values) const {
  const double inf = std::numeric_limits<double>::infinity();
  const auto highest = torch::full({count_}, -inf, values.options()).scatter_reduce(0, index_, values, "amax");
  const auto lowest = torch::full({count_}, inf, values.options()).scatter_reduce(0, index_, values, "amin");
  return broadcast(highest != lowest);
}

}  // namespace inkstone
