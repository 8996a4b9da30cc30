// Validation as sums and counts (docs/training.md, "Sharded validation"): an objective scores the batches it is given
// and returns totals that add up, so data-parallel ranks can each score a share of the split and sum their totals
// instead of all scoring all of it.
#pragma once
#include <map>
#include <string>

namespace inkstone {

struct ValidationSums {
  double units = 0;                    // what the means divide by (scored tokens)
  std::map<std::string, double> sums;  // per-unit sums; "loss_nats" holds the objective's loss
};

// The reported metrics: each sum over the units, the perplexity and bits per byte of loss_nats, and the units as
// "tokens". A split with no units reports zeros.
std::map<std::string, double> validation_metrics(const ValidationSums& totals, double bytes_per_token);

}  // namespace inkstone
