// Activation checkpointing (docs/training.md, "Activation checkpointing"): a checkpointed residual branch runs its
// forward without keeping the activations inside it, and runs it again, with gradient, when backward reaches it.
// Only the branch's inputs stay alive in between, so a block's attention scores, projections and SwiGLU hidden
// state cost memory during one block's backward instead of from forward to backward.
#pragma once
#include <functional>
#include <memory>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "models/auxiliary.h"
#include "models/modulation.h"

namespace inkstone {

// A residual branch as a function of its input and modulation; it may read anything else it captures (the block's
// weights, the attention context), which must stay unchanged until backward.
using ResidualBranch = std::function<torch::Tensor(const torch::Tensor& x, const Modulation& m)>;

// branch(x, m) whose backward recomputes it. The model has no random draws inside a branch, so the recomputation
// is the same computation; bf16 autocast is re-entered if it was on. `owner`: the module the branch belongs to;
// the auxiliary losses it records (MoE balance and z-losses) are moved into `auxiliary` as outputs of the
// checkpointed node, so their gradient reaches the recomputed branch.
torch::Tensor checkpointed_branch(ResidualBranch branch, const torch::Tensor& x, const Modulation& m,
                                  std::shared_ptr<torch::nn::Module> owner, AuxiliaryOutputs& auxiliary);

}  // namespace inkstone
