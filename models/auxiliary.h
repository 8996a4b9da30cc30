// What a model contributes to training besides its logits, without knowing the objective: regularising losses of
// its own (MoE balance and z-losses), which the trainer adds to the objective's loss, statistics to log, and
// updates after each optimizer step (aux-loss-free balancing). Modules with any implement AuxiliarySource.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <torch/nn/module.h>

namespace inkstone {

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
  virtual void after_optimizer_step() {}
};

// Over every AuxiliarySource inside `model`: losses summed, metrics merged (a name several layers report is
// summed).
inline AuxiliaryOutputs take_auxiliary(torch::nn::Module& model) {
  AuxiliaryOutputs total;
  for (const auto& module : model.modules()) {
    auto* source = dynamic_cast<AuxiliarySource*>(module.get());
    if (source == nullptr) continue;
    auto out = source->take_auxiliary();
    if (out.loss.defined()) total.loss = total.loss.defined() ? total.loss + out.loss : out.loss;
    for (auto& [name, value] : out.metrics) {
      auto [it, fresh] = total.metrics.emplace(name, value);
      if (!fresh) it->second = it->second + value;
    }
  }
  return total;
}

inline std::vector<torch::Tensor> rank_statistics(torch::nn::Module& model) {
  std::vector<torch::Tensor> statistics;
  for (const auto& module : model.modules())
    if (auto* source = dynamic_cast<AuxiliarySource*>(module.get()))
      for (auto& t : source->rank_statistics()) statistics.push_back(t);
  return statistics;
}

inline void after_optimizer_step(torch::nn::Module& model) {
  for (const auto& module : model.modules())
    if (auto* source = dynamic_cast<AuxiliarySource*>(module.get())) source->after_optimizer_step();
}

}  // namespace inkstone
