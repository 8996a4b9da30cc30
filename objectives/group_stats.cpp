#include "objectives/group_stats.h"

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

// A group varies when some member differs from its first one (groups are runs of consecutive rows). Exact,
// unlike a variance test, whose float mean of equal values need not equal them.
torch::Tensor RolloutGroups::varies(const torch::Tensor& values) const {
  const auto first_rows = sizes_.cumsum(0) - sizes_;
  const auto differs = values != broadcast(values.index_select(0, first_rows));
  return broadcast(sums(differs.to(values.scalar_type())) > 0);
}

}  // namespace inkstone
