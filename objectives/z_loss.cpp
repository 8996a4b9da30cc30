#include "objectives/z_loss.h"

#include <torch/torch.h>

namespace inkstone {

torch::Tensor log_z_squared(const torch::Tensor& logits) {
  return torch::logsumexp(logits, -1).square();
}

}  // namespace inkstone
