// A metrics line of numbers reduced over the ranks of a data-parallel run, so rank 0 logs the global values.
#pragma once
#include <set>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include "objectives/validation_sums.h"
#include "train/distributed.h"

namespace inkstone {

// One line's numbers over every rank: *_min and *_max take the extreme, throughputs (*_per_s) and `sums` add
// up, the rest are means over equally many rollouts (or problems) per rank, hence the mean of the ranks' values
// (for a per-token mean or a percentile: the mean of the ranks'). A metric some rank lacks is reduced over the
// ranks that have it. `key` names this exchange in the store and must differ between calls; collectives run on
// `device` (NCCL takes CUDA tensors only). Nothing happens in a single process.
void reduce_line_over_ranks(nlohmann::json& line, Distributed& distributed, const std::string& key,
                            torch::Device device, const std::set<std::string>& sums = {});

// Validation totals summed over the ranks, in place (every rank's objective reports the same sums).
void sum_over_ranks(ValidationSums& totals, Distributed& distributed, torch::Device device);

}  // namespace inkstone
