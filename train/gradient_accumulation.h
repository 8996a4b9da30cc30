// One optimizer step's gradient over micro-batches: loss sums backpropagated, divided by the total unit count.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <torch/types.h>

#include "checkpoint/module_weights.h"
#include "core/batch.h"
#include "models/language_model.h"
#include "objectives/objective.h"
#include "train/gradient_synchroniser.h"

namespace inkstone {

struct AccumulatedStep {
  torch::Tensor loss_sum;  // 0-d, detached
  torch::Tensor count;     // 0-d
  std::map<std::string, torch::Tensor> metric_sums;
  std::map<std::string, torch::Tensor> metric_mins;
  std::map<std::string, torch::Tensor> metric_maxes;
};

// Runs the objective on each micro-batch, backpropagating loss sums, then divides the gradients of
// `parameters` by the total count, so any split of a batch into micro-batches gives the full batch's gradient.
// With `across_ranks`, the last backward also sums gradients over ranks, and the loss, count and metrics are
// reduced too, so every rank ends with the global batch's mean gradient: sum over ranks / count over ranks.
AccumulatedStep accumulate_gradients(Objective& objective, LanguageModelImpl& model,
                                     const std::vector<Batch>& micro_batches, const NamedTensors& parameters,
                                     bool autocast, GradientSynchroniser* across_ranks = nullptr);

// Adds `from` into `into`: sums add, minima and maxima keep the extreme (metrics of several updates).
void merge_accumulated_metrics(AccumulatedStep& into, const AccumulatedStep& from);

}  // namespace inkstone
