// Metrics lines reduced over ranks (train/rank_metrics.h).
#include "train/rank_metrics.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "core/string_suffix.h"

namespace inkstone {
namespace {

// The union of every rank's `names`, sorted, on every rank (`key` names this exchange in the store). An objective
// may log a metric on one rank and not on another (GFlowRL's flow-gap percentiles need a non-degenerate group), and
// every rank must then reduce the same list. Collectives run on `device` (NCCL takes CUDA tensors only).
std::vector<std::string> names_on_any_rank(Distributed& distributed, const std::string& key,
                                           const std::vector<std::string>& names, torch::Device device) {
  std::string own;
  for (const auto& name : names) own += name + "\n";
  std::set<std::string> all;
  for (const auto& text : distributed.gather_to_main(key, own)) {
    std::istringstream lines(text);
    for (std::string name; std::getline(lines, name);) all.insert(name);
  }
  std::string joined;
  for (const auto& name : all) joined += name + "\n";
  auto size = torch::tensor({static_cast<int64_t>(joined.size())}, torch::kLong).to(device);
  distributed.broadcast_from_main({size});
  auto bytes = torch::zeros({size.item<int64_t>()}, torch::kUInt8);
  if (distributed.is_main()) std::memcpy(bytes.data_ptr(), joined.data(), joined.size());
  bytes = bytes.to(device);
  distributed.broadcast_from_main({bytes});
  bytes = bytes.cpu();
  std::istringstream lines(std::string(reinterpret_cast<const char*>(bytes.data_ptr()), bytes.numel()));
  std::vector<std::string> result;
  for (std::string name; std::getline(lines, name);) result.push_back(name);
  return result;
}

}  // namespace

void reduce_line_over_ranks(nlohmann::json& line, Distributed& distributed, const std::string& key,
                            torch::Device device, const std::set<std::string>& sums) {
  if (!distributed.active()) return;
  std::vector<std::string> own;
  for (const auto& [name, value] : line.items())
    if (value.is_number()) own.push_back(name);
  const auto names = names_on_any_rank(distributed, key, own, device);
  const auto count = static_cast<int64_t>(names.size());
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  auto total = torch::zeros({count}, f64), present = torch::zeros({count}, f64);
  auto low = torch::full({count}, INFINITY, f64), high = torch::full({count}, -INFINITY, f64);
  for (int64_t i = 0; i < count; ++i) {
    if (!line.contains(names[i])) continue;
    const double v = line[names[i]].get<double>();
    total[i] = v, present[i] = 1.0, low[i] = v, high[i] = v;
  }
  std::vector<torch::Tensor> reduced = {total.to(device), present.to(device), low.to(device), high.to(device)};
  distributed.all_reduce({reduced[0], reduced[1]}, ReduceOp::sum);
  distributed.all_reduce({reduced[2]}, ReduceOp::min);
  distributed.all_reduce({reduced[3]}, ReduceOp::max);
  total = reduced[0].cpu(), present = reduced[1].cpu(), low = reduced[2].cpu(), high = reduced[3].cpu();
  for (int64_t i = 0; i < count; ++i) {
    const auto& name = names[i];
    if (ends_with(name, "_min")) {
      line[name] = low[i].item<double>();
    } else if (ends_with(name, "_max")) {
      line[name] = high[i].item<double>();
    } else {
      const bool summed = sums.count(name) || ends_with(name, "_per_s");
      line[name] = total[i].item<double>() / (summed ? 1.0 : present[i].item<double>());
    }
  }
}

void sum_over_ranks(ValidationSums& totals, Distributed& distributed, torch::Device device) {
  if (!distributed.active()) return;
  std::vector<double> values{totals.units};
  for (const auto& [name, sum] : totals.sums) values.push_back(sum);
  auto packed = torch::tensor(values, torch::kDouble).to(device);
  distributed.all_reduce({packed}, ReduceOp::sum);
  packed = packed.cpu();
  totals.units = packed[0].item<double>();
  int64_t k = 1;
  for (auto& [name, sum] : totals.sums) sum = packed[k++].item<double>();
}

}  // namespace inkstone
