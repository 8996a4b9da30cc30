// Objective registry: one line per objective, keyed by its [objective] name.
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

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
  // Float32 [rows, V] tensors alive at once while one chunk of the vocabulary loss forms its terms and gradient
  // (objectives/chunked_vocab.h), measured as the CPU tensor peak of short runs at V = 151,669 less the rest of
  // the memory plan: AR and masked diffusion 4.9, uniform diffusion 8.9 (its NELBO reads log x̄ over the whole
  // vocabulary); the RL objectives' log-softmax, its exponential for the entropy and their gradients as AR.
  double logit_copies;
  std::function<std::unique_ptr<Objective>(const Config&, const Tokenizer&)> make;
};

const std::map<std::string, Registered>& registry() {
  static const std::map<std::string, Registered> objectives = {
      {"ar", {BatchKind::windows, 5,
              [](const Config& c, const Tokenizer&) { return std::make_unique<AutoregressiveObjective>(c); }}},
      {"uniform_diffusion",
       {BatchKind::windows, 9,
        [](const Config& c, const Tokenizer& t) { return std::make_unique<UniformDiffusionObjective>(c, t); }}},
      {"masked_diffusion",
       {BatchKind::windows, 5,
        [](const Config& c, const Tokenizer& t) { return std::make_unique<MaskedDiffusionObjective>(c, t); }}},
      {"gflowrl", {BatchKind::rollouts, 5,
                   [](const Config& c, const Tokenizer&) { return std::make_unique<GflowrlObjective>(c); }}},
      {"grpo", {BatchKind::rollouts, 5,
                [](const Config& c, const Tokenizer&) { return std::make_unique<GrpoObjective>(c); }}},
      {"flowrl", {BatchKind::rollouts, 5,
                  [](const Config& c, const Tokenizer&) { return std::make_unique<FlowrlObjective>(c); }}},
  };
  return objectives;
}

const Registered& registered(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end())
    throw InputError(fmt::format("objective.name = '{}' is not a registered objective ({})", name,
                                 fmt::join(registered_objective_names(), ", ")));
  return it->second;
}

}  // namespace

std::vector<std::string> registered_objective_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : registry()) names.push_back(name);
  return names;
}

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

double objective_logit_copies(const std::string& name) { return registered(name).logit_copies; }

}  // namespace inkstone
