// AdamW (Loshchilov & Hutter 2019) with weight decay only on matrices; norms, biases, embeddings excluded.
#include "train/optimizer.h"

#include <algorithm>
#include <limits>

#include "core/torch_compat.h"

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

std::unique_ptr<AdamW> make_adamw(const ParameterGroups& groups, const OptimConfig& o) {
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
  return std::make_unique<AdamW>(std::move(param_groups), torch::optim::AdamWOptions(o.learning_rate));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  if (grads.empty()) return torch::zeros({});
  // Multi-tensor kernels: a handful of launches on a GPU instead of two per parameter.
  const auto total = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat).norm(2);
  scale_to_norm(grads, total, max_norm);
  return total;
}

void scale_to_norm(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm, double max_norm) {
  // coefficient = min(1, max_norm / (norm + 1e-6)), applied as a tensor to stay on the device.
  if (max_norm > 0 && !grads.empty()) compat::scale_all_(grads, (max_norm / (norm + 1e-6)).clamp_max(1.0));
}

torch::Tensor all_finite(const std::vector<torch::Tensor>& parameters) {
  if (parameters.empty()) return torch::ones({}, torch::kBool);
  std::vector<torch::Tensor> detached;
  for (const auto& p : parameters) detached.push_back(p.detach());
  // max |x| per tensor is finite exactly when every element is (NaN propagates through the maximum; unlike a sum
  // of squares it cannot overflow).
  return torch::stack(at::_foreach_norm(detached, std::numeric_limits<double>::infinity())).isfinite().all();
}

torch::Tensor AdamW::step(LossClosure closure) {
  if (!runs_fused_kernel()) return torch::optim::AdamW::step(std::move(closure));
  fused_step({});
  return {};
}

std::vector<torch::Tensor> AdamW::step_unless(const torch::Tensor& skip) {
  TORCH_CHECK(runs_fused_kernel(), "AdamW::step_unless needs the fused step (AdamW::runs_fused_kernel)");
  return fused_step(skip);
}

void AdamW::uncount(const std::vector<torch::Tensor>& counted) {
  for (const auto& p : counted) {
    auto& s = static_cast<torch::optim::AdamWParamState&>(*state().at(compat::optimizer_state_key(p)));
    s.step(s.step() - 1);
  }
}

std::vector<torch::Tensor> AdamW::fused_step(const torch::Tensor& skip) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> counted;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state()[compat::optimizer_state_key(p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      steps.push_back(device_step(p, s.step()));
    }
    if (params.empty()) continue;
    const auto [beta1, beta2] = o.betas();
    compat::fused_adamw(params, grads, exp_avgs, exp_avg_sqs, steps, o.lr(), beta1, beta2, o.weight_decay(), o.eps(),
                        skip);
    counted.insert(counted.end(), params.begin(), params.end());
  }
  return counted;
}

bool AdamW::runs_fused_kernel() const {
  for (const auto& group : param_groups()) {
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params())
      if (!compat::has_fused_adamw(p.device().type()) || p.scalar_type() != torch::kFloat) return false;
  }
  return true;
}

// The fused kernel reads the step count from a device tensor; it mirrors the host count, which checkpoints keep,
// and is rebuilt from it whenever the two could differ (a fresh parameter, a resumed state, a skip taken back).
torch::Tensor AdamW::device_step(const torch::Tensor& p, int64_t step) {
  auto& [count, tensor] = device_steps_[p.unsafeGetTensorImpl()];
  if (!tensor.defined() || count != step - 1) {
    tensor = torch::full({}, static_cast<double>(step), p.options().dtype(torch::kFloat));
  } else {
    tensor.add_(1);
  }
  count = step;
  return tensor;
}

}  // namespace inkstone
