#include "train/zero_sharding.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

#include "core/torch_compat.h"
#include "train/optimizer.h"

namespace inkstone {

std::vector<int64_t> assign_owners(const std::vector<torch::Tensor>& tensors, int64_t ranks) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tensors[a].numel() > tensors[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int64_t> owners(tensors.size(), 0);
  for (size_t k : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owners[k] = lightest;
    load[static_cast<size_t>(lightest)] += tensors[k].numel();
  }
  return owners;
}

ZeroSharding::ZeroSharding(Distributed& distributed, const NamedTensors& parameters, int64_t stage,
                           const std::vector<torch::Tensor>& gathered)
    : distributed_(distributed), stage_(stage) {
  for (const auto& [name, p] : parameters) parameters_.push_back(p);
  owners_ = assign_owners(parameters_, distributed_.world_size());
  std::unordered_set<const void*> on_demand;
  for (const auto& p : gathered) on_demand.insert(p.unsafeGetTensorImpl());
  for (const auto& p : parameters_) gathered_.push_back(on_demand.count(p.unsafeGetTensorImpl()) > 0);
}

int64_t ZeroSharding::owner_of(const torch::Tensor& parameter) const {
  for (size_t k = 0; k < parameters_.size(); ++k)
    if (parameters_[k].unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return owners_[k];
  throw std::logic_error("ZeRO: a tensor that is not a trained parameter");
}

NamedTensors ZeroSharding::owned(const NamedTensors& named) const {
  std::unordered_set<const void*> mine;
  for (size_t k = 0; k < parameters_.size(); ++k)
    if (owners_[k] == distributed_.rank()) mine.insert(parameters_[k].unsafeGetTensorImpl());
  NamedTensors out;
  for (const auto& item : named)
    if (mine.count(item.second.unsafeGetTensorImpl())) out.push_back(item);
  return out;
}

void ZeroSharding::drop_foreign_gradients() {
  for (size_t k = 0; k < parameters_.size(); ++k)
    if (owners_[k] != distributed_.rank()) parameters_[k].mutable_grad().reset();
}

torch::Tensor ZeroSharding::clip_grad_norm(double max_norm) {
  std::vector<torch::Tensor> grads;
  for (size_t k = 0; k < parameters_.size(); ++k)
    if (owners_[k] == distributed_.rank() && parameters_[k].grad().defined())
      grads.push_back(parameters_[k].grad().detach());
  const auto device = parameters_.empty() ? torch::Device(torch::kCPU) : parameters_.front().device();
  torch::Tensor squares = torch::zeros({}, torch::dtype(torch::kDouble).device(device));
  if (!grads.empty()) squares = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kDouble).pow(2).sum();
  distributed_.all_reduce({squares}, ReduceOp::sum);
  const torch::Tensor total = squares.sqrt().to(torch::kFloat);
  scale_to_norm(grads, total, max_norm);
  return total;
}

void ZeroSharding::share_updated_parameters() {
  torch::NoGradGuard no_grad;
  for (int64_t owner = 0; owner < distributed_.world_size(); ++owner) {
    std::vector<torch::Tensor> members;
    for (size_t k = 0; k < parameters_.size(); ++k)
      if (owners_[k] == owner && !gathered_[k]) members.push_back(parameters_[k]);
    if (members.empty()) continue;
    // One message per owner: its parameters packed into one buffer (they share the optimizer's dtype).
    std::vector<torch::Tensor> flat_parts;
    for (const auto& p : members) flat_parts.push_back(p.detach().reshape({-1}));
    torch::Tensor flat = torch::cat(flat_parts);
    distributed_.broadcast_from({flat}, owner);
    if (owner == distributed_.rank()) continue;
    int64_t offset = 0;
    for (auto& p : members) {
      p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
}

torch::Tensor ZeroSharding::all_weights_finite() {
  std::vector<torch::Tensor> mine;
  for (size_t k = 0; k < parameters_.size(); ++k)
    if (owners_[k] == distributed_.rank()) mine.push_back(parameters_[k]);
  torch::Tensor finite = all_finite(mine).to(parameters_.front().device(), torch::kFloat).reshape({1});
  distributed_.all_reduce({finite}, ReduceOp::min);
  return finite.reshape({});
}

}  // namespace inkstone
