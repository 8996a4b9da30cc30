// Gradient accumulation: the gradient of a batch's mean loss, whatever its split into micro-batches or ranks.
#include "train/gradient_accumulation.h"

#include "core/torch_compat.h"
#include "models/auxiliary.h"

namespace inkstone {
namespace {

// Folds one set of metrics into another with `combine` (sum, min or max).
template <typename Combine>
void merge_metrics(std::map<std::string, torch::Tensor>& into, const std::map<std::string, torch::Tensor>& from,
                   Combine combine) {
  for (const auto& [name, value] : from) {
    auto it = into.find(name);
    if (it == into.end())
      into.emplace(name, value.detach());
    else
      it->second = combine(it->second, value.detach());
  }
}

void merge_metrics(AccumulatedStep& into, const std::map<std::string, torch::Tensor>& sums,
                   const std::map<std::string, torch::Tensor>& mins,
                   const std::map<std::string, torch::Tensor>& maxes) {
  merge_metrics(into.metric_sums, sums, [](auto a, auto b) { return a + b; });
  merge_metrics(into.metric_mins, mins, [](auto a, auto b) { return torch::minimum(a, b); });
  merge_metrics(into.metric_maxes, maxes, [](auto a, auto b) { return torch::maximum(a, b); });
}

// Loss, count and metrics of the global batch: sums, minima and maxima over ranks, one collective each, issued in
// the same order on every rank.
void reduce_over_ranks(AccumulatedStep& acc, Distributed& distributed) {
  std::vector<torch::Tensor> sums{acc.loss_sum, acc.count}, mins, maxes;
  for (const auto& [name, value] : acc.metric_sums) sums.push_back(value);
  for (const auto& [name, value] : acc.metric_mins) mins.push_back(value);
  for (const auto& [name, value] : acc.metric_maxes) maxes.push_back(value);
  distributed.all_reduce(sums, ReduceOp::sum);
  distributed.all_reduce(mins, ReduceOp::min);
  distributed.all_reduce(maxes, ReduceOp::max);
}

}  // namespace

AccumulatedStep accumulate_gradients(Objective& objective, LanguageModelImpl& model,
                                     const std::vector<Batch>& micro_batches, const NamedTensors& parameters,
                                     bool autocast, GradientSynchroniser* across_ranks) {
  const auto device = micro_batches.front().tokens.device();
  AccumulatedStep acc;
  acc.loss_sum = torch::zeros({}, torch::dtype(torch::kFloat).device(device));
  acc.count = torch::zeros({}, torch::dtype(torch::kFloat).device(device));
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const Batch& micro = micro_batches[m];
    take_auxiliary(model);  // drop what a forward outside this step left
    LossOutput out = [&] {
      compat::CudaAutocastScope scope(autocast);
      return objective.loss(model, micro);
    }();
    if (across_ranks && m + 1 == micro_batches.size()) across_ranks->arm();
    // The model's own regularisers (MoE balance, z-loss) are per-micro-batch means: weighted by the unit count,
    // they reach the gradient as a count-weighted mean; the logged loss stays the objective's.
    const AuxiliaryOutputs aux = take_auxiliary(model);
    (aux.loss.defined() ? out.loss_sum + aux.loss.to(out.loss_sum.dtype()) * out.count : out.loss_sum).backward();
    for (const auto& [name, value] : aux.metrics) out.metric_sums[name] = value * out.count;
    acc.loss_sum += out.loss_sum.detach().to(torch::kFloat);
    acc.count += out.count;
    merge_metrics(acc, out.metric_sums, out.metric_mins, out.metric_maxes);
  }
  if (across_ranks) {
    across_ranks->finish();
    reduce_over_ranks(acc, across_ranks->distributed());
  }
  // Gradients hold d(sum of unit losses); dividing by the total makes them d(mean) for any micro-batching.
  const auto inverse_count = 1.0 / acc.count.clamp_min(1.0);
  for (const auto& [name, p] : parameters)
    if (p.grad().defined()) p.grad().mul_(inverse_count);
  return acc;
}

void merge_accumulated_metrics(AccumulatedStep& into, const AccumulatedStep& from) {
  merge_metrics(into, from.metric_sums, from.metric_mins, from.metric_maxes);
}

}  // namespace inkstone
