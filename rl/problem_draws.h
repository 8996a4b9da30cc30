// The random draws that make one procedural problem: the k-th draw for problem `index` is a pure function of
// (seed, index, k), so a problem never depends on which other problems were made, or in what order.
#pragma once
#include <cstdint>

#include "core/counter_hash.h"

namespace inkstone {

class ProblemDraws {
 public:
  ProblemDraws(uint64_t seed, int64_t index) : seed_(seed), index_(static_cast<uint64_t>(index)) {}

  // Uniform in [lo, hi], lo <= hi.
  int64_t uniform(int64_t lo, int64_t hi) {
    const uint64_t hash = counter_hash({seed_, index_, count_++});
    return lo + static_cast<int64_t>(hash_below(hash, static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  uint64_t seed_;
  uint64_t index_;
  uint64_t count_ = 0;
};

}  // namespace inkstone
