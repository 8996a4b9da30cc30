#include "train/master_weights.h"

#include <map>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "core/errors.h"

namespace inkstone {
namespace {

const std::string kMasterSuffix = ".master";

}  // namespace

MasterWeights::MasterWeights(const NamedTensors& stepped) : stepped_(stepped) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : stepped_) {
    const bool copy = p.scalar_type() != torch::kFloat;
    has_master_.push_back(copy);
    optimized_.emplace_back(name, copy ? p.detach().to(torch::kFloat).clone().requires_grad_(true) : p);
  }
}

ParameterGroups MasterWeights::optimized(const ParameterGroups& groups) const {
  std::unordered_map<const void*, torch::Tensor> master_of;
  for (size_t k = 0; k < stepped_.size(); ++k)
    master_of[stepped_[k].second.unsafeGetTensorImpl()] = optimized_[k].second;
  auto map = [&](const NamedTensors& named) {
    NamedTensors out;
    for (const auto& [name, p] : named) out.emplace_back(name, master_of.at(p.unsafeGetTensorImpl()));
    return out;
  };
  return {map(groups.decay), map(groups.no_decay)};
}

void MasterWeights::adopt_parameters() {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < stepped_.size(); ++k)
    if (has_master_[k]) optimized_[k].second.detach().copy_(stepped_[k].second);
}

void MasterWeights::take_gradients() {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < stepped_.size(); ++k) {
    if (!has_master_[k]) continue;
    auto& p = stepped_[k].second;
    auto& master = optimized_[k].second;
    master.mutable_grad() = p.grad().defined() ? p.grad().to(torch::kFloat) : torch::Tensor();
    p.mutable_grad().reset();
  }
}

void MasterWeights::write_back() {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < stepped_.size(); ++k) {
    if (!has_master_[k]) continue;
    stepped_[k].second.detach().copy_(optimized_[k].second);  // round to nearest even
    optimized_[k].second.mutable_grad().reset();
  }
}

NamedTensors MasterWeights::export_values() const {
  NamedTensors out;
  for (size_t k = 0; k < stepped_.size(); ++k)
    if (has_master_[k]) out.emplace_back(optimized_[k].first + kMasterSuffix, optimized_[k].second.detach());
  return out;
}

void MasterWeights::import_values(const NamedTensors& state, const std::string& origin) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < stepped_.size(); ++k) {
    if (!has_master_[k]) continue;
    const std::string key = optimized_[k].first + kMasterSuffix;
    const auto found = by_name.find(key);
    if (found == by_name.end())
      throw InputError(fmt::format("{}: no master weights '{}' (written by a run with run.param_dtype = \"fp32\"? "
                                   "resume with the same run.param_dtype)",
                                   origin, key));
    auto& master = optimized_[k].second;
    if (found->second.sizes() != master.sizes() || found->second.scalar_type() != torch::kFloat)
      throw InputError(fmt::format("{}: master weights '{}' are {} {}, the parameter's are float32 {}", origin, key,
                                   c10::toString(found->second.scalar_type()), fmt::join(found->second.sizes(), "x"),
                                   fmt::join(master.sizes(), "x")));
    master.detach().copy_(found->second);
  }
}

}  // namespace inkstone
