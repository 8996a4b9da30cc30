// AdamW with decay and no-decay parameter groups, and a sync-free global gradient-norm clip.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include "checkpoint/safetensors.h"
#include "config/config.h"

namespace inkstone {

// Which group a parameter belongs to by its name: "norm", "bias", "embedding" or "" (plain weight).
std::string parameter_role(const std::string& name);

struct ParameterGroups {
  NamedTensors decay;
  NamedTensors no_decay;
};
ParameterGroups split_parameter_groups(const torch::nn::Module& model, const std::vector<std::string>& no_decay);

// libtorch's AdamW (its state and checkpoints unchanged), whose step on float32 parameters is the multi-tensor
// fused kernel where libtorch has it for their device (compat::fused_adamw): the same update, one launch per
// group. The fused step can also take the step-or-skip decision on the device (docs/training.md, "A step without
// host synchronisation").
class AdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether the step is the fused kernel (every parameter float32, on a device that has it); step_unless needs it.
  bool runs_fused_kernel() const;
  // The step, skipped on the device where `skip` (0-d float32 on the parameters' device, 1 or 0) is 1: weights,
  // moments and the device step counts stay. The host step counts (which checkpoints keep) advance either way;
  // returns the parameters they advanced for, which uncount() takes back once the host learns of a skip.
  std::vector<torch::Tensor> step_unless(const torch::Tensor& skip);
  void uncount(const std::vector<torch::Tensor>& counted);

 private:
  std::vector<torch::Tensor> fused_step(const torch::Tensor& skip);
  torch::Tensor device_step(const torch::Tensor& p, int64_t step);
  std::unordered_map<const void*, std::pair<int64_t, torch::Tensor>> device_steps_;  // host count, device copy
};

// Group 0 decays, group 1 does not (when non-empty).
std::unique_ptr<AdamW> make_adamw(const ParameterGroups& groups, const OptimConfig& optim);
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Scales gradients so their global L2 norm is at most max_norm (0: no clipping) and returns the pre-clip norm
// as a 0-d tensor; no host synchronisation.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& parameters, double max_norm);
// The clipping step alone: scales `grads` so that, with `norm` their global norm (0-d), it is at most max_norm.
void scale_to_norm(const std::vector<torch::Tensor>& grads, const torch::Tensor& norm, double max_norm);

// A 0-d bool tensor: every element of every parameter is finite. No host synchronisation: a trainer checks an
// update by sending this to the host together with the next step's numbers (docs/reliability.md).
torch::Tensor all_finite(const std::vector<torch::Tensor>& parameters);

}  // namespace inkstone
