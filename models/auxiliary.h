// What a model contributes to training besides its logits, without knowing the objective: regularising losses of
// its own (MoE balance and z-losses), which the trainer adds to the objective's loss, statistics to log, and
// updates after each optimizer step (aux-loss-free balancing). Modules with any implement AuxiliarySource.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <c10/core/GradMode.h>

namespace inkstone {

// Which pass of a sublayer's forward is running. Activation checkpointing (models/branch_node.h) runs a
// checkpointed block twice: first without gradient, then again in backward with it.
enum class ForwardPass {
  plain,         // an ordinary forward: auxiliary outputs are recorded when gradient is enabled
  checkpointed,  // the gradient-free first pass of a checkpointed block: losses recorded as values, statistics counted
  recomputed,    // backward's second pass: losses recorded with their graph, statistics not counted again
};
inline thread_local ForwardPass current_forward_pass = ForwardPass::plain;

// What a training-mode module records in the current pass.
struct AuxiliaryRecording {
  bool losses = false;
  bool statistics = false;
};
inline AuxiliaryRecording auxiliary_recording(bool training) {
  if (!training) return {};
  switch (current_forward_pass) {
    case ForwardPass::plain: {
      const bool grad = torch::GradMode::is_enabled();
      return {grad, grad};
    }
    case ForwardPass::checkpointed: return {true, true};
    case ForwardPass::recomputed: return {true, false};
  }
  return {};
}

struct AuxiliaryOutputs {
  torch::Tensor loss;                            // 0-d, differentiable, already weighted; undefined: none
  std::map<std::string, torch::Tensor> metrics;  // 0-d, detached
};

class AuxiliarySource {
 public:
  virtual ~AuxiliarySource() = default;
  // The outputs of the latest training forward (training mode, gradient enabled); forgets them.
  virtual AuxiliaryOutputs take_auxiliary() = 0;
  // What after_optimizer_step() reads that each data-parallel rank counted over its own rows (e.g. expert loads):
  // the trainer sums these tensors over the ranks, in place, before the call, so every rank updates alike.
  virtual std::vector<torch::Tensor> rank_statistics() { return {}; }
  // After every optimizer update, taken or skipped. `applied`: a 0-d float32 tensor on the model's device, 1 where
  // the optimizer took the step and 0 where it skipped it; the trainer may decide that on the device
  // (docs/training.md, "A step without host synchronisation"), so an update must depend on it without reading it.
  virtual void after_optimizer_step(const torch::Tensor& applied) { (void)applied; }
};

// Over every AuxiliarySource inside `model`: losses summed, metrics merged (a name several layers report is
// summed).
inline void add_auxiliary(AuxiliaryOutputs& total, const AuxiliaryOutputs& out) {
  if (out.loss.defined()) total.loss = total.loss.defined() ? total.loss + out.loss : out.loss;
  for (const auto& [name, value] : out.metrics) {
    auto [it, fresh] = total.metrics.emplace(name, value);
    if (!fresh) it->second = it->second + value;
  }
}

inline AuxiliaryOutputs take_auxiliary(torch::nn::Module& model) {
  AuxiliaryOutputs total;
  for (const auto& module : model.modules())
    if (auto* source = dynamic_cast<AuxiliarySource*>(module.get())) add_auxiliary(total, source->take_auxiliary());
  return total;
}

inline std::vector<torch::Tensor> rank_statistics(torch::nn::Module& model) {
  std::vector<torch::Tensor> statistics;
  for (const auto& module : model.modules())
    if (auto* source = dynamic_cast<AuxiliarySource*>(module.get()))
      for (auto& t : source->rank_statistics()) statistics.push_back(t);
  return statistics;
}

inline void after_optimizer_step(torch::nn::Module& model, const torch::Tensor& applied) {
  for (const auto& module : model.modules())
    if (auto* source = dynamic_cast<AuxiliarySource*>(module.get())) source->after_optimizer_step(applied);
}

}  // namespace inkstone
