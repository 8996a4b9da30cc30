// A residual branch run as one autograd node, for the two memory savings that need a hook where backward reaches
// the branch (docs/training.md, "Activation checkpointing" and "ZeRO"):
// - recompute (activation checkpointing): the forward keeps only the branch's inputs and reruns the branch, with
//   gradient, when backward reaches it, so a block's attention scores, projections and SwiGLU hidden state cost
//   memory during one branch's backward instead of from forward to backward;
// - weights on demand (ZeRO stage 3): the branch's weights are acquired from a ParameterResidency just before the
//   forward and again just before the backward, and released right after each.
#pragma once
#include <functional>
#include <memory>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "models/auxiliary.h"
#include "models/modulation.h"
#include "models/parameter_residency.h"

namespace inkstone {

// A residual branch as a function of its input and modulation; it may read anything else it captures (the block's
// weights, the attention context), which must stay unchanged until backward.
using ResidualBranch = std::function<torch::Tensor(const torch::Tensor& x, const Modulation& m)>;

struct BranchNodePlan {
  bool recompute = false;
  std::shared_ptr<ParameterResidency> residency;  // null: the weights stay where they are
  int64_t unit = 0;                               // the branch's weights in `residency`
};

// branch(x, m) as one autograd node. The model has no random draws inside a branch, so a recomputation is the
// same computation; bf16 autocast is re-entered if it was on. `owner`: the module the branch belongs to; the
// auxiliary losses it records (MoE balance and z-losses) are moved into `auxiliary` as outputs of the node, so
// their gradient reaches the branch.
torch::Tensor branch_node(ResidualBranch branch, const torch::Tensor& x, const Modulation& m,
                          std::shared_ptr<torch::nn::Module> owner, AuxiliaryOutputs& auxiliary,
                          const BranchNodePlan& plan);

}  // namespace inkstone
