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

namespace {

struct Registered {
  BatchKind consumes;
  std::function<std::unique_ptr<Objective>(const Config&, const Tokenizer&)> make;
};

const std::map<std::string, Registered>& registry() {
  static const std::map<std::string, Registered> objectives = {
      {"ar", {BatchKind::windows,
              [](const Config& c, const Tokenizer&) { return std::make_unique<AutoregressiveObjective>(c); }}},
      {"uniform_diffusion",
       {BatchKind::windows,
        [](const Config& c, const Tokenizer& t) { return std::make_unique<UniformDiffusionObjective>(c, t); }}},
      {"masked_diffusion",
       {BatchKind::windows,
        [](const Config& c, const Tokenizer& t) { return std::make_unique<MaskedDiffusionObjective>(c, t); }}},
      {"gflowrl", {BatchKind::rollouts,
                   [](const Config& c, const Tokenizer&) { return std::make_unique<GflowrlObjective>(c); }}},
      {"grpo", {BatchKind::rollouts,
                [](const Config& c, const Tokenizer&) { return std::make_unique<GrpoObjective>(c); }}},
      {"flowrl", {BatchKind::rollouts,
                  [](const Config& c, const Tokenizer&) { return std::make_unique<FlowrlObjective>(c); }}},
  };
  return objectives;
}

const Registered& registered(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [registered_name, entry] : registry()) known += (known.empty() ? "" : ", ") + registered_name;
    throw InputError(fmt::format("objective.name = '{}' is not a registered objective ({})", name, known));
  }
  return it->second;
}

}  // namespace

std::unique_ptr<Objective> make_objective(const Config& config, const Tokenizer& tokenizer) {
  const Registered& entry = registered(config.objective.name);
  auto objective = entry.make(config, tokenizer);
  if (objective->needs().consumes != entry.consumes)
    throw std::logic_error("objective '" + config.objective.name + "' is registered with the wrong batch kind");
  if (config.model.time_conditioning && !objective->needs().time_input)
    throw InputError(fmt::format("model.time_conditioning needs an objective that feeds the noise level (a diffusion "
                                 "objective), not objective.name = '{}'",
                                 config.objective.name));
  return objective;
}

BatchKind objective_batch_kind(const std::string& name) { return registered(name).consumes; }

}  // namespace inkstone
