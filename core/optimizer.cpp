// AdamW (Loshchilov & Hutter 2019) with weight decay only on matrices; norms, biases, embeddings excluded.
#include "core/optimizer.h"

#include <algorithm>

namespace inkstone {

std::string parameter_role(const std::string& name) {
  if (name.find("norm") != std::string::npos) return "norm";
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) return "bias";
  if (name.find("embed") != std::string::npos) return "embedding";
  return "";
}

ParameterGroups split_parameter_groups(const torch::nn::Module& model, const std::vector<std::string>& no_decay) {
  ParameterGroups groups;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    const std::string role = parameter_role(item.key());
    const bool exempt = !role.empty() && std::find(no_decay.begin(), no_decay.end(), role) != no_decay.end();
    (exempt ? groups.no_decay : groups.decay).emplace_back(item.key(), item.value());
  }
  return groups;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(const ParameterGroups& groups, const OptimConfig& o) {
  auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(o.learning_rate)
                                                            .betas({o.beta1, o.beta2})
                                                            .eps(o.eps)
                                                            .weight_decay(weight_decay));
  };
  auto tensors = [](const NamedTensors& named) {
    std::vector<torch::Tensor> out;
    for (const auto& [name, p] : named) out.push_back(p);
    return out;
  };
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  param_groups.emplace_back(tensors(groups.decay), options(o.weight_decay));
  if (!groups.no_decay.empty()) param_groups.emplace_back(tensors(groups.no_decay), options(0.0));
  return std::make_unique<torch::optim::AdamW>(std::move(param_groups),
                                               torch::optim::AdamWOptions(o.learning_rate));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> norms;
  for (const auto& p : parameters)
    if (p.grad().defined()) norms.push_back(p.grad().detach().norm(2).to(torch::kFloat));
  if (norms.empty()) return torch::zeros({});
  auto total = torch::stack(norms).norm(2);
  if (max_norm > 0) {
    // coefficient = min(1, max_norm / (norm + 1e-6)), applied as a tensor to stay on the device.
    auto coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (const auto& p : parameters)
      if (p.grad().defined()) p.grad().mul_(coefficient.to(p.grad().dtype()));
  }
  return total;
}

torch::Tensor all_finite(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> flags;
  for (const auto& p : parameters) flags.push_back(torch::isfinite(p.detach()).all());
  return flags.empty() ? torch::ones({}, torch::kBool) : torch::stack(flags).all();
}

}  // namespace inkstone
