// Parameters by name, so checkpoints survive a change in registration order.
#include "checkpoint/module_weights.h"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"

namespace inkstone {

NamedTensors module_weights(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

void load_module_weights(torch::nn::Module& module, const NamedTensors& weights, const std::string& origin) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> saved(weights.begin(), weights.end());
  for (auto& item : module.named_parameters()) {
    auto it = saved.find(item.key());
    if (it == saved.end())
      throw InputError(fmt::format("{}: no weight '{}' for this model", origin, item.key()));
    if (it->second.sizes() != item.value().sizes())
      throw InputError(fmt::format("{}: weight '{}' has shape [{}], the model expects [{}]", origin, item.key(),
                                   fmt::join(it->second.sizes(), ", "), fmt::join(item.value().sizes(), ", ")));
    // A checkpoint holds the dtype its model trains in; another one means a foreign or edited file, and copy_
    // would convert it silently (import converts Hugging Face weights on purpose, before they get here).
    if (it->second.scalar_type() != item.value().scalar_type())
      throw InputError(fmt::format("{}: weight '{}' is {}, the model holds {}", origin, item.key(),
                                   c10::toString(it->second.scalar_type()), c10::toString(item.value().scalar_type())));
    item.value().copy_(it->second);
  }
}

}  // namespace inkstone
