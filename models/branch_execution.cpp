#include "models/branch_execution.h"

#include <numeric>
#include <vector>

#include <c10/core/GradMode.h>

namespace inkstone {

// A branch whose weights come and go needs its own autograd node once gradient is on: backward must find the
// weights again (models/branch_node.h). Without gradient, holding them around the call is enough.
torch::Tensor BranchExecution::run(ResidualBranch branch, const torch::Tensor& x, const Modulation& m,
                                   std::shared_ptr<torch::nn::Module> owner, AuxiliaryOutputs& auxiliary,
                                   int64_t layer, int64_t unit, bool recomputable) const {
  const bool recompute = recomputes(layer, recomputable);
  if (recompute || (residency_ && torch::GradMode::is_enabled()))
    return branch_node(std::move(branch), x, m, std::move(owner), auxiliary, {recompute, residency_, unit});
  if (!residency_) return branch(x, m);
  const ResidentUnits weights(residency_, {unit});
  return branch(x, m);
}

ResidentUnits BranchExecution::whole(int64_t unit_count) const {
  std::vector<int64_t> all(residency_ ? static_cast<size_t>(unit_count) : 0);
  std::iota(all.begin(), all.end(), 0);
  return ResidentUnits(residency_, std::move(all));
}

}  // namespace inkstone
