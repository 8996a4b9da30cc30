// Parameters by name, so checkpoints survive a change in registration order.
#include "checkpoint/module_weights.h"

#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"

namespace inkstone {

NamedTensors module_weights(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

void load_module_weights(torch::nn::Module& module, const NamedTensors& weights, const std::string& origin,
                         bool keep_missing) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> saved(weights.begin(), weights.end());
  for (auto& item : module.named_parameters()) {
    auto it = saved.find(item.key());
    if (it == saved.end() && keep_missing) continue;
    if (it == saved.end())
      throw InputError(fmt::format("{}: no weight '{}' for this model", origin, item.key()));
    if (it->second.sizes() != item.value().sizes())
      throw InputError(fmt::format("{}: weight '{}' has shape [{}], the model expects [{}]", origin, item.key(),
                                   fmt::join(it->second.sizes(), ", "), fmt::join(item.value().sizes(), ", ")));
    // A checkpoint holds the dtype its model trains in; a narrower model would round it silently (import
    // converts Hugging Face weights on purpose, before they get here). A wider one holds it exactly: a model
    // trained with bf16 weights samples and exports in fp32.
    const auto saved_type = it->second.scalar_type(), model_type = item.value().scalar_type();
    const bool exact = saved_type == model_type ||
                       (it->second.is_floating_point() && item.value().is_floating_point() &&
                        c10::promoteTypes(saved_type, model_type) == model_type);
    if (!exact)
      throw InputError(fmt::format("{}: weight '{}' is {}, the model holds {}", origin, item.key(),
                                   c10::toString(it->second.scalar_type()), c10::toString(item.value().scalar_type())));
    item.value().copy_(it->second);
  }
}

void cast_parameters(torch::nn::Module& module, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters(/*recurse=*/true))
    if (p.is_floating_point() && p.scalar_type() != dtype) p.set_data(p.to(dtype));
}

torch::ScalarType parameter_dtype(const torch::nn::Module& module) {
  std::optional<torch::ScalarType> found;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (!p.is_floating_point()) continue;
    if (found && *found != p.scalar_type()) throw std::logic_error("a module with parameters of several dtypes");
    found = p.scalar_type();
  }
  return found.value_or(torch::kFloat);
}

}  // namespace inkstone
