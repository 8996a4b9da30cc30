#include "checkpoint/optimizer_state.h"

#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "core/errors.h"
#include "core/json_error.h"
#include "core/torch_compat.h"

namespace inkstone {
namespace {

// Every named parameter must belong to the optimizer, or its state would be filed under a key step() never reads.
void check_parameters_belong(const torch::optim::AdamW& optimizer, const NamedTensors& parameters) {
  std::unordered_set<const void*> known;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) known.insert(p.unsafeGetTensorImpl());
  for (const auto& [name, p] : parameters)
    if (!known.count(p.unsafeGetTensorImpl()))
      throw std::invalid_argument("optimizer state: parameter '" + name + "' is not in the optimizer's param groups");
}

// ".master": the fp32 master copy of a bf16 parameter (train/master_weights.h), kept with the optimizer's state
// because the optimizer steps it; AdamW's import leaves it to the master weights.
const std::vector<std::string> kSuffixes = {".exp_avg", ".exp_avg_sq", ".step", ".max_exp_avg_sq", ".master"};

// The parameter a state entry belongs to ("<parameter><suffix>"), if it is one of `names`.
std::optional<std::string> parameter_of(const std::string& key, const std::unordered_set<std::string>& names) {
  for (const auto& suffix : kSuffixes)
    if (key.size() > suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string name = key.substr(0, key.size() - suffix.size());
      if (names.count(name)) return name;
    }
  return std::nullopt;
}

std::unordered_set<std::string> names_of(const NamedTensors& parameters) {
  std::unordered_set<std::string> names;
  for (const auto& [name, p] : parameters) names.insert(name);
  return names;
}

InputError foreign_entry(const std::string& origin, const std::string& key) {
  return InputError(fmt::format("{}: optimizer state '{}' belongs to no parameter of this model", origin, key));
}

}  // namespace

NamedTensors export_adamw_state(torch::optim::AdamW& optimizer, const NamedTensors& parameters) {
  check_parameters_belong(optimizer, parameters);
  // State the names do not cover would silently be lost, and the resumed run would differ.
  std::set<compat::OptimizerStateKey> named;
  for (const auto& [name, p] : parameters) named.insert(compat::optimizer_state_key(p));
  for (const auto& [key, state] : optimizer.state())
    if (!named.count(key)) throw std::invalid_argument("optimizer state: a parameter with state has no name");
  NamedTensors out;
  for (const auto& [name, p] : parameters) {
    const auto found = optimizer.state().find(compat::optimizer_state_key(p));
    if (found == optimizer.state().end()) {
      // Recorded as "no state yet", so that a loader tells it from a parameter whose state was lost.
      out.emplace_back(name + ".step", torch::tensor(int64_t{0}, torch::kInt64));
      continue;
    }
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    out.emplace_back(name + ".exp_avg", s.exp_avg());
    out.emplace_back(name + ".exp_avg_sq", s.exp_avg_sq());
    out.emplace_back(name + ".step", torch::tensor(s.step(), torch::kInt64));
    if (s.max_exp_avg_sq().defined()) out.emplace_back(name + ".max_exp_avg_sq", s.max_exp_avg_sq());
  }
  return out;
}

void import_adamw_state(torch::optim::AdamW& optimizer, const NamedTensors& parameters, const NamedTensors& state,
                        const std::string& origin) {
  check_parameters_belong(optimizer, parameters);
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());

  // Every entry must belong to a known parameter, or the checkpoint is for another model.
  const auto names = names_of(parameters);
  for (const auto& [key, tensor] : by_name)
    if (!parameter_of(key, names)) throw foreign_entry(origin, key);

  optimizer.state().clear();
  for (const auto& [name, p] : parameters) {
    const auto step = by_name.find(name + ".step");
    if (step == by_name.end() || step->second.numel() != 1 || step->second.scalar_type() != torch::kInt64)
      throw InputError(fmt::format("{}: optimizer state is incomplete: no int64 scalar '{}.step' for parameter '{}' "
                                   "(resuming would restart its moments)",
                                   origin, name, name));
    if (step->second.item<int64_t>() == 0 && !by_name.count(name + ".exp_avg")) continue;  // no update yet
    auto piece = [&, &name = name, &p = p](const std::string& suffix) -> torch::Tensor {
      const auto found = by_name.find(name + suffix);
      if (found == by_name.end())
        throw InputError(fmt::format("{}: optimizer state for '{}' has no '{}'", origin, name, name + suffix));
      if (found->second.sizes() != p.sizes())
        throw InputError(fmt::format("{}: optimizer state '{}' has shape {}, the parameter has {}", origin,
                                     name + suffix, fmt::join(found->second.sizes(), "x"), fmt::join(p.sizes(), "x")));
      // The moments are written in their parameter's dtype; another one (an edited file) would be converted into
      // other moments than a clean resume has.
      if (found->second.scalar_type() != p.scalar_type())
        throw InputError(fmt::format("{}: optimizer state '{}' is {}, the parameter's moments are {}", origin,
                                     name + suffix, c10::toString(found->second.scalar_type()),
                                     c10::toString(p.scalar_type())));
      return found->second.to(p.device(), p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    };
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(piece(".exp_avg"));
    s->exp_avg_sq(piece(".exp_avg_sq"));
    if (by_name.count(name + ".max_exp_avg_sq")) s->max_exp_avg_sq(piece(".max_exp_avg_sq"));
    s->step(step->second.item<int64_t>());
    optimizer.state()[compat::optimizer_state_key(p)] = std::move(s);
  }
}

nlohmann::json adamw_hyperparameters(const torch::optim::AdamW& optimizer) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    groups.push_back({{"lr", o.lr()},
                      {"beta1", std::get<0>(o.betas())},
                      {"beta2", std::get<1>(o.betas())},
                      {"eps", o.eps()},
                      {"weight_decay", o.weight_decay()},
                      {"amsgrad", o.amsgrad()}});
  }
  return groups;
}

void set_adamw_hyperparameters(torch::optim::AdamW& optimizer, const nlohmann::json& groups,
                               const std::string& origin) {
  if (!groups.is_array() || groups.size() != optimizer.param_groups().size())
    throw InputError(fmt::format("{}: optimizer hyperparameters must list {} param groups", origin,
                                 optimizer.param_groups().size()));
  try {
    for (size_t i = 0; i < groups.size(); ++i) {
      auto& o = static_cast<torch::optim::AdamWOptions&>(optimizer.param_groups()[i].options());
      const auto& g = groups[i];
      o.lr(g.at("lr").get<double>());
      o.betas({g.at("beta1").get<double>(), g.at("beta2").get<double>()});
      o.eps(g.at("eps").get<double>());
      o.weight_decay(g.at("weight_decay").get<double>());
      o.amsgrad(g.at("amsgrad").get<bool>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: optimizer hyperparameters: {}", origin, describe_json_error(e)));
  }
}

NamedTensors adamw_state_subset(const NamedTensors& state, const NamedTensors& all, const NamedTensors& subset,
                                const std::string& origin) {
  const auto known = names_of(all);
  const auto wanted = names_of(subset);
  NamedTensors out;
  for (const auto& [key, tensor] : state) {
    const auto name = parameter_of(key, known);
    if (!name) throw foreign_entry(origin, key);
    if (wanted.count(*name)) out.emplace_back(key, tensor);
  }
  return out;
}

}  // namespace inkstone
