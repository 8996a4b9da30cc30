#include "models/delta_conversion.h"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "core/errors.h"

namespace inkstone {

ModelConfig delta_routing_config(const ModelConfig& plain, int64_t heads, DeltaSources sources, int64_t blocks) {
  if (plain.residual != ResidualMode::plain)
    throw InputError(fmt::format("only a plain-residual model converts to delta routing; this one has "
                                 "model.residual = \"{}\"", choice_name(plain.residual)));
  if (heads < 1 || plain.d_model % heads != 0)
    throw InputError(fmt::format("routing heads {} must divide model.d_model = {}", heads, plain.d_model));
  if (sources == DeltaSources::block && (blocks < 1 || blocks > plain.n_layers))
    throw InputError(fmt::format("delta blocks {} must lie in 1..model.n_layers = {}", blocks, plain.n_layers));
  ModelConfig routed = plain;
  routed.residual = ResidualMode::delta;
  routed.residual_heads = heads;
  routed.residual_delta = sources;
  routed.residual_delta_gate = DeltaGate::zero;  // α = 0: the converted model is the plain one
  if (sources == DeltaSources::block) routed.residual_blocks = blocks;
  return routed;
}

void load_plain_weights(LanguageModelImpl& routed, const NamedTensors& plain_weights, const std::string& origin) {
  std::map<std::string, torch::Tensor> by_name(plain_weights.begin(), plain_weights.end());
  torch::NoGradGuard no_grad;
  for (auto& item : routed.named_parameters()) {
    const auto found = by_name.find(item.key());
    if (found == by_name.end()) {
      if (item.key().rfind("routing.", 0) == 0) continue;
      throw InputError(fmt::format("{}: the plain model has no weight '{}'", origin, item.key()));
    }
    if (found->second.sizes() != item.value().sizes())
      throw InputError(fmt::format("{}: weight '{}' has shape {}, the routed model needs {}", origin, item.key(),
                                   fmt::join(found->second.sizes(), "x"), fmt::join(item.value().sizes(), "x")));
    item.value().copy_(found->second);
    by_name.erase(found);
  }
  if (!by_name.empty())
    throw InputError(fmt::format("{}: weight '{}' belongs to no parameter of the routed model", origin,
                                 by_name.begin()->first));
}

}  // namespace inkstone
