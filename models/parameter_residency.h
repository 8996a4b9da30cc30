// Where a model's branch weights live between uses (docs/training.md, "ZeRO"). Under ZeRO stage 3 each residual
// branch's weights are whole on their owner rank only: the model asks for a branch's weights just before the branch
// runs (in forward, and again when backward reaches it) and gives them back right after, so a rank holds its own
// shard plus the branch in use. A model without a residency keeps all its weights all the time.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace inkstone {

// A unit is one residual branch's weights (LanguageModelImpl::residency_units numbers them).
class ParameterResidency {
 public:
  virtual ~ParameterResidency() = default;
  // Makes the unit's weights whole on this rank until the matching release. A collective: every rank acquires
  // and releases the same units in the same order. Acquisitions nest (counted).
  virtual void acquire(int64_t unit) = 0;
  virtual void release(int64_t unit) = 0;
};

// Holds `units` whole for its lifetime; nothing without a residency.
class ResidentUnits {
 public:
  ResidentUnits(std::shared_ptr<ParameterResidency> residency, std::vector<int64_t> units)
      : residency_(std::move(residency)), units_(std::move(units)) {
    if (residency_)
      for (int64_t unit : units_) residency_->acquire(unit);
  }
  ~ResidentUnits() {
    if (residency_)
      for (auto it = units_.rbegin(); it != units_.rend(); ++it) residency_->release(*it);
  }
  ResidentUnits(ResidentUnits&& other) noexcept
      : residency_(std::move(other.residency_)), units_(std::move(other.units_)) {}
  ResidentUnits(const ResidentUnits&) = delete;
  ResidentUnits& operator=(const ResidentUnits&) = delete;
  ResidentUnits& operator=(ResidentUnits&&) = delete;

 private:
  std::shared_ptr<ParameterResidency> residency_;
  std::vector<int64_t> units_;
};

}  // namespace inkstone
