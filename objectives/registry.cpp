// Objective registry: one line per objective, keyed by its [objective] name.
#include <functional>

#include <fmt/format.h>

#include "core/errors.h"
#include "objectives/ar.h"
#include "objectives/flowrl.h"
#include "objectives/gflowrl.h"
#include "objectives/grpo.h"
#include "objectives/masked_diffusion.h"
#include "objectives/uniform_diffusion.h"

namespace inkstone {

std::unique_ptr<Objective> make_objective(const Config& config, const Tokenizer& tokenizer) {
  using Factory = std::function<std::unique_ptr<Objective>(const Config&, const Tokenizer&)>;
  static const std::map<std::string, Factory> registry = {
      {"ar", [](const Config& c, const Tokenizer&) { return std::make_unique<AutoregressiveObjective>(c); }},
      {"uniform_diffusion",
       [](const Config& c, const Tokenizer& t) { return std::make_unique<UniformDiffusionObjective>(c, t); }},
      {"masked_diffusion",
       [](const Config& c, const Tokenizer& t) { return std::make_unique<MaskedDiffusionObjective>(c, t); }},
      {"gflowrl", [](const Config& c, const Tokenizer&) { return std::make_unique<GflowrlObjective>(c); }},
      {"grpo", [](const Config& c, const Tokenizer&) { return std::make_unique<GrpoObjective>(c); }},
      {"flowrl", [](const Config& c, const Tokenizer&) { return std::make_unique<FlowrlObjective>(c); }},
  };
  auto it = registry.find(config.objective.name);
  if (it == registry.end()) throw InputError(fmt::format("unknown objective '{}'", config.objective.name));
  return it->second(config, tokenizer);
}

}  // namespace inkstone
