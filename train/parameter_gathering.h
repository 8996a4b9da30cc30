// ZeRO stage 3's weights on demand (docs/training.md, "ZeRO"): a rank keeps the residual-branch weights it owns
// and frees the storage of the others; acquiring a branch's unit allocates them again and fills them by broadcast
// from their owners, and its last release frees them. The tensors themselves stay (same shapes, same autograd
// identity, same version counters), only their memory comes and goes, so the optimizer, the gradient hooks and
// the graph a branch saved for backward all keep pointing at the right weights. While a unit runs, the next one
// (the next branch in forward, the previous in backward) is prefetched: its broadcasts are started on acquisition
// and waited for when it is acquired in turn.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "models/parameter_residency.h"
#include "train/distributed.h"
#include "train/zero_sharding.h"

namespace inkstone {

class ParameterGathering : public ParameterResidency {
 public:
  // units: the model's residency units (LanguageModelImpl::residency_units), each member a trained parameter
  // that owns its whole storage. Every weight is whole on every rank until release_foreign_weights().
  ParameterGathering(Distributed& distributed, const ZeroSharding& sharding,
                     const std::vector<std::vector<torch::Tensor>>& units);
  ~ParameterGathering() override;
  ParameterGathering(const ParameterGathering&) = delete;
  ParameterGathering& operator=(const ParameterGathering&) = delete;

  void acquire(int64_t unit) override;
  void release(int64_t unit) override;
  // Frees every foreign weight held by no acquisition: once all ranks hold the same whole weights.
  void release_foreign_weights();
  // Every weight whole from now on, whatever is released later (the end of training: the model outlives the
  // process group).
  void make_whole_for_good();

 private:
  struct Member {
    torch::Tensor weight;
    int64_t owner;
  };
  struct Unit {
    std::vector<Member> members;
    int64_t holds = 0;
  };
  // Allocates the unit's foreign weights and starts their broadcasts.
  std::vector<PendingCollective> start_gather(Unit& unit);
  void free_foreign(Unit& unit);
  // Completes the prefetch, if any; its hold is given back unless the prefetched unit is `kept`.
  void finish_prefetch(int64_t kept);
  void prefetch_after(int64_t unit);

  Distributed& distributed_;
  std::vector<Unit> units_;
  int64_t last_acquired_ = -1;
  bool forward_order_ = true;  // units are being acquired in ascending order (forward), else descending
  int64_t prefetched_ = -1;    // the unit whose broadcasts are in flight, holding one acquisition; -1: none
  std::vector<PendingCollective> prefetch_;
};

}  // namespace inkstone
