// Per-group statistics of per-rollout values for the RL objectives: groups are runs of equal ids in
// RolloutAnnotations::groups, and every statistic is broadcast back to the group's rows.
#pragma once
#include <torch/types.h>

namespace inkstone {

class RolloutGroups {
 public:
  explicit RolloutGroups(const torch::Tensor& group_ids);  // [B] int64, each group's rows adjacent

  torch::Tensor mean(const torch::Tensor& values) const;  // [B]
  // Unbiased (n − 1) standard deviation, as torch.std in the GRPO trainers (docs/rl.md, "Group statistics").
  torch::Tensor std(const torch::Tensor& values) const;   // [B]
  // True for rows whose group has at least two distinct values.
  torch::Tensor varies(const torch::Tensor& values) const;  // [B] bool
  int64_t count() const { return count_; }

 private:
  torch::Tensor broadcast(const torch::Tensor& per_group) const { return per_group.index_select(0, index_); }
  torch::Tensor sums(const torch::Tensor& values) const;

  torch::Tensor index_;  // [B]: 0-based group of each row
  torch::Tensor sizes_;  // [K]
  int64_t count_ = 0;
};

}  // namespace inkstone
