// Objective registry: one line per objective, keyed by its [objective] name.
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/errors.h"
#include "models/block_registry.h"
#include "objectives/ar.h"
#include "objectives/flowrl.h"
#include "objectives/gflowrl.h"
#include "objectives/diffusion_objective.h"
#include "objectives/diffusion_policy.h"
#include "objectives/grpo.h"
#include "objectives/masked_noise.h"
#include "objectives/mixture_noise.h"
#include "objectives/policy_log_probs.h"
#include "objectives/uniform_noise.h"

namespace inkstone {

namespace {

struct Registered {
  BatchKind consumes;  // windows: objective.z_loss, data.inject_step and metrics.watch_text apply
  // Float32 [rows, V] tensors alive at once while one chunk of the vocabulary loss forms its terms and gradient
  // (objectives/chunked_vocab.h), measured as the CPU tensor peak of short runs at V = 151,669 less the rest of
  // the memory plan: AR and masked diffusion 4.9, uniform diffusion 8.9 (its NELBO reads log x̄ over the whole
  // vocabulary); the RL objectives' log-softmax, its exponential for the entropy and their gradients as AR.
  double logit_copies;
  bool denoises;        // a diffusion objective: diffusion.block_size applies (docs/objectives.md, "Block diffusion")
  bool weighs_is_term;  // reads diffusion.is_weight, the weight of the IS term of noise that spreads
  bool mixes_noise;     // reads diffusion.mixture_uniform and diffusion.mixture_gamma
  std::function<std::unique_ptr<Objective>(const Config&, const Tokenizer&)> make;
  // How an RL objective reads a policy this objective trained (objectives/policy_likelihood.h); null for the RL
  // objectives themselves, which train policies of the others.
  std::function<std::unique_ptr<PolicyLikelihood>(const Config&, const Tokenizer&)> make_policy;
};

// A diffusion objective over the noise process `Noise` (objectives/noise_process.h).
template <typename Noise>
std::unique_ptr<Objective> diffusion_objective(const Config& c, const Tokenizer& t) {
  return std::make_unique<DiffusionObjective>(c, t, std::make_shared<Noise>(c.diffusion));
}

// A policy trained by the diffusion objective over `Noise`, read as rl.likelihood says.
template <typename Noise>
std::unique_ptr<PolicyLikelihood> diffusion_policy(const Config& c, const Tokenizer& t) {
  return std::make_unique<DiffusionPolicy>(c, t, std::make_shared<Noise>(c.diffusion));
}

std::unique_ptr<PolicyLikelihood> causal_policy(const Config& c, const Tokenizer&) {
  return std::make_unique<CausalPolicy>(c);
}

// The RL objectives over any policy.
template <typename Rl>
std::unique_ptr<Objective> rl_objective(const Config& c, const Tokenizer& t) {
  return std::make_unique<Rl>(c, t);
}

const std::map<std::string, Registered>& registry() {
  static const std::map<std::string, Registered> objectives = {
      {"ar", {BatchKind::windows, 5, false, false, false,
              [](const Config& c, const Tokenizer&) { return std::make_unique<AutoregressiveObjective>(c); },
              causal_policy}},
      {"uniform_diffusion",
       {BatchKind::windows, 9, true, true, false, diffusion_objective<UniformNoise>, diffusion_policy<UniformNoise>}},
      {"masked_diffusion",
       {BatchKind::windows, 5, true, false, false, diffusion_objective<MaskedNoise>, diffusion_policy<MaskedNoise>}},
      {"mixture_diffusion",
       {BatchKind::windows, 9, true, true, true, diffusion_objective<MixtureNoise>, diffusion_policy<MixtureNoise>}},
      {"gflowrl", {BatchKind::rollouts, 5, false, false, false, rl_objective<GflowrlObjective>, nullptr}},
      {"grpo", {BatchKind::rollouts, 5, false, false, false, rl_objective<GrpoObjective>, nullptr}},
      {"flowrl", {BatchKind::rollouts, 5, false, false, false, rl_objective<FlowrlObjective>, nullptr}},
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

// The registered names whose entry has `has`, for a message.
std::string names_where(const std::function<bool(const Registered&)>& has) {
  std::vector<std::string> names;
  for (const auto& [name, entry] : registry())
    if (has(entry)) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool trains_on_windows(const Registered& entry) { return entry.consumes == BatchKind::windows; }
bool trains_policies(const Registered& entry) { return entry.make_policy != nullptr; }

// Block diffusion feeds [x_0 | x_t] under a block-causal attention rule: every token mixer must follow the rule (a
// convolution over time would carry x_t into x_0), and a QK conv or hidden streams would mix slots outside it.
void check_block_diffusion_model(const ModelConfig& m, int64_t block) {
  if (!mixes_tokens_only_by_attention(m) || m.hidden_streams > 1)
    throw InputError(fmt::format("diffusion.block_size = {} needs attention-only token mixing (model.mixer_pattern "
                                 "of token mixers that follow the attention rule, no qkv_conv, one hidden stream), "
                                 "not model.mixer_pattern = \"{}\"",
                                 block, m.mixer_pattern));
}

}  // namespace

void check_objective_settings(const Config& c) {
  const std::string& name = c.objective.name;
  const Registered& entry = registered(name);
  if (c.objective.z_loss > 0 && !trains_on_windows(entry))
    throw InputError(fmt::format("objective.z_loss = {} applies to {}, not objective.name = '{}'", c.objective.z_loss,
                                 names_where(trains_on_windows), name));
  if ((c.data.inject_step > 0 || !c.metrics.watch_text.empty()) && !trains_on_windows(entry))
    throw InputError(fmt::format("data.inject_step and metrics.watch_text apply to objectives that train on token "
                                 "windows ({}), not objective.name = '{}'",
                                 names_where(trains_on_windows), name));
  // The diffusion keys describe the model: an RL run's come with the policy it adopted (rl.policy).
  const bool rl_run = !trains_on_windows(entry);
  const char* key = rl_run ? "rl.policy" : "objective.name";
  const std::string model_name = rl_run ? policy_objective_name(c) : name;
  const Registered& model = registered(model_name);
  if (c.diffusion.is_weight != 1.0 && !model.weighs_is_term)
    throw InputError(fmt::format("diffusion.is_weight = {} weights the IS term of noise that spreads ({}); "
                                 "{} = '{}' has none",
                                 c.diffusion.is_weight, names_where([](const Registered& e) { return e.weighs_is_term; }),
                                 key, model_name));
  const DiffusionConfig unset = default_config().diffusion;
  if ((c.diffusion.mixture_uniform != unset.mixture_uniform || c.diffusion.mixture_gamma != unset.mixture_gamma) &&
      !model.mixes_noise)
    throw InputError(fmt::format("diffusion.mixture_uniform and diffusion.mixture_gamma shape mixture noise ({}), not "
                                 "{} = '{}'",
                                 names_where([](const Registered& e) { return e.mixes_noise; }), key, model_name));
  if (const int64_t steps = c.diffusion.attention_anneal_steps; steps > 0) {
    if (!model.denoises)
      throw InputError(fmt::format("diffusion.attention_anneal_steps = {} opens a causal model's attention for a "
                                   "diffusion objective ({}), not {} = '{}'",
                                   steps, names_where([](const Registered& e) { return e.denoises; }), key, model_name));
    // The annealed attention is an explicit [T, T] rule, which carries neither a time input, nor packed documents,
    // nor the block-causal rule of block diffusion.
    if (c.model.time_conditioning || c.data.document_mask || c.diffusion.block_size > 0)
      throw InputError(fmt::format("diffusion.attention_anneal_steps = {} does not combine with "
                                   "model.time_conditioning, data.document_mask or diffusion.block_size",
                                   steps));
  }
  if (c.diffusion.shifted_outputs) {
    if (!model.denoises)
      throw InputError(fmt::format("diffusion.shifted_outputs = true reads a diffusion model's outputs one position "
                                   "on ({}), not {} = '{}'",
                                   names_where([](const Registered& e) { return e.denoises; }), key, model_name));
    // Block diffusion reads x_t's half of [x_0 | x_t], whose first position would read x_0's last.
    if (c.diffusion.block_size > 0)
      throw InputError("diffusion.shifted_outputs = true does not combine with diffusion.block_size");
  }
  if (c.diffusion.block_size > 0) {
    if (!model.denoises)
      throw InputError(fmt::format("diffusion.block_size = {} needs a diffusion objective ({}), not {} = '{}'",
                                   c.diffusion.block_size, names_where([](const Registered& e) { return e.denoises; }),
                                   key, model_name));
    check_block_diffusion_model(c.model, c.diffusion.block_size);
  }
}

std::string policy_objective_name(const Config& c) {
  const std::string name = c.rl.policy.empty() ? "ar" : c.rl.policy;
  const auto it = registry().find(name);
  if (it == registry().end() || !trains_policies(it->second))
    throw InputError(fmt::format("rl.policy = '{}' must name the objective that trained the policy ({})", name,
                                 names_where(trains_policies)));
  return name;
}

std::unique_ptr<PolicyLikelihood> make_policy_likelihood(const Config& config, const Tokenizer& tokenizer) {
  const std::string name = policy_objective_name(config);
  // Rollouts come from the whole-canvas sampler (rl/policy_rollouts.h); blocks are generated one at a time.
  if (config.diffusion.block_size > 0)
    throw InputError(fmt::format("rl.policy = '{}' with diffusion.block_size = {}: RL on block diffusion policies is "
                                 "not supported; start from a model trained on whole windows",
                                 name, config.diffusion.block_size));
  const Registered& entry = registered(name);
  const RlConfig unset = default_config().rl;
  const RlConfig& rl = config.rl;
  if (!entry.denoises && (rl.likelihood != unset.likelihood || rl.elbo_samples != unset.elbo_samples ||
                          rl.prompt_mask != unset.prompt_mask))
    throw InputError(fmt::format("rl.likelihood, rl.elbo_samples and rl.prompt_mask read a diffusion policy; "
                                 "rl.policy = '{}' decodes left to right and its log-probs are exact",
                                 name));
  return entry.make_policy(config, tokenizer);
}

Config policy_model_config(const Config& config) {
  Config policy = config;
  policy.objective.name = policy_objective_name(config);
  policy.diffusion.attention_anneal_steps = 0;
  return policy;
}

std::unique_ptr<Objective> make_policy_objective(const Config& config, const Tokenizer& tokenizer) {
  if (trains_on_windows(registered(config.objective.name))) return make_objective(config, tokenizer);
  return make_objective(policy_model_config(config), tokenizer);
}

std::vector<std::string> registered_objective_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Objective> make_objective(const Config& config, const Tokenizer& tokenizer) {
  check_objective_settings(config);
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
