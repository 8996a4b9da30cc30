#include "objectives/z_loss.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor log_z_squared(const torch::Tensor& logits) {
  return torch::logsumexp(logits.to(torch::kFloat), -1).square();
}

void add_z_loss(LossOutput& out, const torch::Tensor& sums, double weight) {
  const auto total = sums.sum();
  out.loss_sum = out.loss_sum + weight * total;
  out.metric_sums["log_z_squared"] = total.detach();
}

}  // namespace inkstone
