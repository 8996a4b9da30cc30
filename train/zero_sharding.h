// ZeRO sharding over the data-parallel ranks (Rajbhandari et al., ZeRO, 2020; docs/training.md, "ZeRO"): each
// parameter is owned by one rank, which alone keeps its AdamW moments and applies its update, then sends the
// updated values to the others. Stage 1 shards the optimizer state; stage 2 also reduces each gradient only to its
// owner (train/gradient_synchroniser.h); stage 3 also keeps the weights of the residual branches on
// their owner only, gathered around each use (train/parameter_gathering.h). Whole tensors are assigned, balanced
// by size, so each rank steps an ordinary libtorch AdamW over its own parameters and the update is the unsharded
// one exactly.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "checkpoint/safetensors.h"
#include "train/distributed.h"

namespace inkstone {

// The owner of each tensor: largest first, each to the rank with the fewest elements so far (ties: lowest rank).
// Deterministic, so every rank and every resumed run computes the same assignment.
std::vector<int64_t> assign_owners(const std::vector<torch::Tensor>& tensors, int64_t ranks);

class ZeroSharding {
 public:
  // parameters: everything the run optimises, in the same order on every rank. gathered (stage 3): those whose
  // foreign copies are gathered on demand instead of sent after each update.
  ZeroSharding(Distributed& distributed, const NamedTensors& parameters, int64_t stage,
               const std::vector<torch::Tensor>& gathered = {});

  int64_t stage() const { return stage_; }
  const std::vector<int64_t>& owners() const { return owners_; }
  // The members of `named` (a subset of the parameters, matched by tensor) this rank owns.
  NamedTensors owned(const NamedTensors& named) const;
  // The rank that owns `parameter` (one of the parameters).
  int64_t owner_of(const torch::Tensor& parameter) const;
  // Drops the gradients of parameters other ranks own (stage 1 keeps them between backward and the update).
  void drop_foreign_gradients();
  // The global L2 norm of every gradient (each counted once, by its owner), clipped to max_norm (0: no
  // clipping) on the owned gradients; returns the pre-clip norm as a 0-d tensor.
  torch::Tensor clip_grad_norm(double max_norm);
  // Each rank's updated parameters to every other rank (not the gathered ones).
  void share_updated_parameters();
  // 1 when every weight on every rank is finite, else 0 (a 0-d tensor; a collective: each rank checks its own).
  torch::Tensor all_weights_finite();

 private:
  Distributed& distributed_;
  int64_t stage_;
  std::vector<torch::Tensor> parameters_;
  std::vector<int64_t> owners_;
  std::vector<bool> gathered_;
};

}  // namespace inkstone
