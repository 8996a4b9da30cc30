#include "train/parameter_gathering.h"

#include <stdexcept>
#include <utility>

#include "core/tensor_storage.h"

namespace inkstone {

ParameterGathering::ParameterGathering(Distributed& distributed, const ZeroSharding& sharding,
                                       const std::vector<std::vector<torch::Tensor>>& units)
    : distributed_(distributed) {
  for (const auto& weights : units) {
    Unit unit;
    for (const auto& w : weights) {
      // Freeing the storage must free exactly this weight: not a view, not sharing, not foreign memory.
      if (!owns_whole_storage(w))
        throw std::logic_error("ZeRO stage 3: a branch weight that does not own its whole storage");
      unit.members.push_back({w, sharding.owner_of(w)});
    }
    units_.push_back(std::move(unit));
  }
}

ParameterGathering::~ParameterGathering() {
  try {
    finish_prefetch(-1);
  } catch (const std::exception&) {  // a failed rank: its error was reported where it happened
  }
}

std::vector<PendingCollective> ParameterGathering::start_gather(Unit& unit) {
  for (const auto& m : unit.members)
    if (m.owner != distributed_.rank()) allocate_storage(m.weight);
  // Straight into the weights' own memory: no copy, and no version bump that would invalidate a saved graph.
  std::vector<PendingCollective> pending;
  for (int64_t owner = 0; owner < distributed_.world_size(); ++owner) {
    std::vector<torch::Tensor> sent;
    for (const auto& m : unit.members)
      if (m.owner == owner) sent.push_back(m.weight);
    if (!sent.empty()) pending.push_back(distributed_.start_broadcast(std::move(sent), owner));
  }
  return pending;
}

void ParameterGathering::finish_prefetch(int64_t kept) {
  if (prefetched_ < 0) return;
  for (const auto& p : prefetch_) distributed_.wait(p);
  prefetch_.clear();
  const int64_t unit = std::exchange(prefetched_, -1);
  if (unit != kept) release(unit);
}

// Every rank sees the same sequence of acquisitions, so every rank prefetches the same unit.
void ParameterGathering::prefetch_after(int64_t unit) {
  if (unit == last_acquired_) forward_order_ = !forward_order_;  // the last branch of forward starts backward
  else forward_order_ = unit > last_acquired_;
  last_acquired_ = unit;
  const int64_t next = forward_order_ ? unit + 1 : unit - 1;
  if (next < 0 || next >= static_cast<int64_t>(units_.size())) return;
  Unit& upcoming = units_[static_cast<size_t>(next)];
  if (upcoming.holds > 0) return;  // already whole
  ++upcoming.holds;
  prefetch_ = start_gather(upcoming);
  prefetched_ = next;
}

void ParameterGathering::acquire(int64_t unit_index) {
  Unit& unit = units_.at(static_cast<size_t>(unit_index));
  const bool was_prefetched = prefetched_ == unit_index;
  finish_prefetch(unit_index);
  if (!was_prefetched && unit.holds++ == 0)
    for (const auto& p : start_gather(unit)) distributed_.wait(p);
  prefetch_after(unit_index);
}

void ParameterGathering::release(int64_t unit_index) {
  Unit& unit = units_.at(static_cast<size_t>(unit_index));
  if (unit.holds <= 0) throw std::logic_error("ZeRO stage 3: a branch's weights released more often than acquired");
  if (--unit.holds == 0) free_foreign(unit);
}

void ParameterGathering::make_whole_for_good() {
  for (size_t unit = 0; unit < units_.size(); ++unit) acquire(static_cast<int64_t>(unit));
}

void ParameterGathering::release_foreign_weights() {
  for (auto& unit : units_)
    if (unit.holds == 0) free_foreign(unit);
}

void ParameterGathering::free_foreign(Unit& unit) {
  for (const auto& m : unit.members)
    if (m.owner != distributed_.rank()) free_storage(m.weight);
}

}  // namespace inkstone
