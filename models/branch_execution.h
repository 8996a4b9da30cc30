// How a model runs its residual branches (docs/training.md, "Activation checkpointing" and "ZeRO"): which blocks
// recompute their branches in backward, and where the branches' weights live between uses. A trainer hands the
// model one (LanguageModelImpl::set_branch_execution), as torchtitan's parallelize step wraps a model it did not
// write; the model asks it to run each branch and names neither policy.
#pragma once
#include <cstdint>
#include <memory>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "models/auxiliary.h"
#include "models/branch_node.h"
#include "models/modulation.h"
#include "models/parameter_residency.h"

namespace inkstone {

class BranchExecution {
 public:
  BranchExecution() = default;  // every branch called directly, its weights always whole
  // checkpoint_every = k: blocks 0, k, 2k, ... recompute their branches in backward (0: none). residency: the
  // branches acquire their weights from it around each use (ZeRO stage 3); null: always whole.
  BranchExecution(int64_t checkpoint_every, std::shared_ptr<ParameterResidency> residency)
      : checkpoint_every_(checkpoint_every), residency_(std::move(residency)) {}

  // Block `layer`'s branch, whose weights are residency unit `unit`, on x. `recomputable`: the pass may recompute
  // (a training forward with gradient and no cache). `owner` and `auxiliary` as branch_node's.
  torch::Tensor run(ResidualBranch branch, const torch::Tensor& x, const Modulation& m,
                    std::shared_ptr<torch::nn::Module> owner, AuxiliaryOutputs& auxiliary, int64_t layer,
                    int64_t unit, bool recomputable) const;
  // Whether block `layer`'s branches are plain calls (no node of their own, weights always whole), so that the
  // assembler may run their norms outside them, fused with the residual add.
  bool calls_directly(int64_t layer, bool recomputable) const {
    return !residency_ && !recomputes(layer, recomputable);
  }
  // Units 0..unit_count−1 whole while the result lives (generation, checkpoint writing); nothing without a
  // residency.
  ResidentUnits whole(int64_t unit_count) const;
  int64_t checkpoint_every() const { return checkpoint_every_; }

 private:
  bool recomputes(int64_t layer, bool recomputable) const {
    return recomputable && checkpoint_every_ > 0 && layer % checkpoint_every_ == 0;
  }

  int64_t checkpoint_every_ = 0;
  std::shared_ptr<ParameterResidency> residency_;
};

}  // namespace inkstone
