#include "sweep/sweep_plan.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/errors.h"

namespace inkstone {
namespace {

const std::set<std::string> kSweepKeys = {"base",  "out",     "seeds",    "data_seeds", "steps", "tokens",
                                          "flops", "metrics", "baseline", "alpha",      "set"};

std::vector<std::string> strings_at(const toml::node_view<const toml::node>& node, const std::string& where) {
  std::vector<std::string> out;
  if (!node) return out;
  const auto* array = node.as_array();
  if (!array) throw InputError(where + ": expected a list of strings");
  for (const auto& item : *array) {
    if (!item.is_string()) throw InputError(where + ": expected a list of strings");
    out.push_back(*item.value<std::string>());
  }
  return out;
}

std::vector<int64_t> integers_at(const toml::node_view<const toml::node>& node, const std::string& where) {
  std::vector<int64_t> out;
  if (!node) return out;
  const auto* array = node.as_array();
  if (!array) throw InputError(where + ": expected a list of integers");
  for (const auto& item : *array) {
    if (!item.is_integer() || *item.value<int64_t>() < 0)
      throw InputError(where + ": expected a list of integers >= 0");
    out.push_back(*item.value<int64_t>());
  }
  return out;
}

}  // namespace

SweepSpec load_sweep(const std::filesystem::path& file) {
  toml::table root;
  try {
    root = toml::parse_file(file.string());
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}: {}", file.string(), e.source().begin.line, e.description()));
  }
  const std::string name = file.string();
  for (const auto& [key, value] : root)
    if (key.str() != "sweep" && key.str() != "variant")
      throw InputError(fmt::format("{}: unknown section '{}' (a sweep has [sweep] and [[variant]])", name, key.str()));
  const auto* sweep = root["sweep"].as_table();
  if (!sweep) throw InputError(fmt::format("{}: no [sweep] section", name));
  for (const auto& [key, value] : *sweep)
    if (!kSweepKeys.count(std::string(key.str())))
      throw InputError(fmt::format("{}: unknown key '{}' in [sweep]", name, key.str()));

  SweepSpec spec;
  spec.file = file;
  const std::filesystem::path folder = file.parent_path();
  const auto base = (*sweep)["base"].value<std::string>();
  if (!base) throw InputError(fmt::format("{}: [sweep] base (the base config file) is missing", name));
  spec.base_config = folder / *base;
  const auto out = (*sweep)["out"].value<std::string>();
  spec.out_dir = out ? std::filesystem::path(*out) : std::filesystem::path("runs") / "sweeps" / file.stem();
  spec.seeds = integers_at((*sweep)["seeds"], name + ": [sweep] seeds");
  if (spec.seeds.empty()) throw InputError(fmt::format("{}: [sweep] seeds must list at least one seed", name));
  spec.data_seeds = integers_at((*sweep)["data_seeds"], name + ": [sweep] data_seeds");
  if (spec.data_seeds.empty()) spec.data_seeds = spec.seeds;
  if (spec.data_seeds.size() != spec.seeds.size())
    throw InputError(fmt::format("{}: [sweep] data_seeds has {} entries and seeds {}: one per seed", name,
                                 spec.data_seeds.size(), spec.seeds.size()));

  int budgets = 0;
  for (const auto& [key, kind] : {std::pair{"steps", BudgetKind::steps}, std::pair{"tokens", BudgetKind::tokens},
                                  std::pair{"flops", BudgetKind::flops}}) {
    const auto amount = (*sweep)[key].value<double>();
    if (!amount) continue;
    ++budgets;
    if (!(*amount >= 1)) throw InputError(fmt::format("{}: [sweep] {} = {} must be at least 1", name, key, *amount));
    spec.budget = kind;
    spec.budget_amount = *amount;
  }
  if (budgets != 1) throw InputError(fmt::format("{}: [sweep] needs exactly one budget: steps, tokens or flops", name));
  spec.metrics = strings_at((*sweep)["metrics"], name + ": [sweep] metrics");
  if (spec.metrics.empty()) spec.metrics = {"val/loss"};
  spec.common = strings_at((*sweep)["set"], name + ": [sweep] set");
  spec.alpha = (*sweep)["alpha"].value_or(0.05);
  if (!(spec.alpha > 0 && spec.alpha < 1)) throw InputError(fmt::format("{}: [sweep] alpha must be in (0, 1)", name));

  const auto* variants = root["variant"].as_array();
  if (!variants || variants->empty()) throw InputError(fmt::format("{}: no [[variant]] tables", name));
  std::set<std::string> names;
  for (const auto& node : *variants) {
    const auto* table = node.as_table();
    const auto variant_name = table ? (*table)["name"].value<std::string>() : std::nullopt;
    if (!variant_name || variant_name->empty() || variant_name->find('/') != std::string::npos)
      throw InputError(fmt::format("{}: every [[variant]] needs a name (a folder name, no '/')", name));
    for (const auto& [key, value] : *table)
      if (key.str() != "name" && key.str() != "set")
        throw InputError(
            fmt::format("{}: unknown key '{}' in variant '{}' (name, set)", name, key.str(), *variant_name));
    if (!names.insert(*variant_name).second)
      throw InputError(fmt::format("{}: two variants are named '{}'", name, *variant_name));
    spec.variants.push_back(
        {*variant_name, strings_at((*table)["set"], fmt::format("{}: variant '{}' set", name, *variant_name))});
  }
  spec.baseline = (*sweep)["baseline"].value_or(spec.variants.front().name);
  if (!names.count(spec.baseline))
    throw InputError(fmt::format("{}: [sweep] baseline '{}' is not a variant", name, spec.baseline));
  return spec;
}

std::vector<SweepRun> plan_sweep(const SweepSpec& spec, const TrainingFlopsPerToken& flops_per_token) {
  std::vector<SweepRun> runs;
  for (const auto& variant : spec.variants) {
    std::vector<std::string> overrides = spec.common;
    overrides.insert(overrides.end(), variant.overrides.begin(), variant.overrides.end());
    const Config config = load_config(spec.base_config.string(), overrides);
    const double tokens_per_step = static_cast<double>(config.train.batch_size * config.data.seq_len);
    double steps = spec.budget_amount;
    if (spec.budget == BudgetKind::tokens) steps = spec.budget_amount / tokens_per_step;
    if (spec.budget == BudgetKind::flops) steps = spec.budget_amount / (tokens_per_step * flops_per_token(config));
    const auto whole_steps = static_cast<int64_t>(std::floor(steps));
    if (whole_steps < 1)
      throw InputError(fmt::format("{}: the budget buys variant '{}' no training step ({:.3g})", spec.file.string(),
                                   variant.name, steps));
    for (size_t i = 0; i < spec.seeds.size(); ++i) {
      SweepRun run;
      run.variant = variant.name;
      run.seed_index = static_cast<int>(i);
      run.seed = spec.seeds[i];
      run.data_seed = spec.data_seeds[i];
      run.steps = whole_steps;
      run.run_dir = spec.out_dir / variant.name / fmt::format("seed-{}", i);
      run.overrides = overrides;
      run.overrides.push_back(fmt::format("run.seed={}", run.seed));
      run.overrides.push_back(fmt::format("data.seed={}", run.data_seed));
      run.overrides.push_back(fmt::format("train.steps={}", run.steps));
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

std::vector<const SweepRun*> training_order(const std::vector<SweepRun>& runs) {
  std::vector<const SweepRun*> order;
  for (const auto& run : runs) order.push_back(&run);
  std::stable_sort(order.begin(), order.end(),
                   [](const SweepRun* a, const SweepRun* b) { return a->seed_index < b->seed_index; });
  return order;
}

}  // namespace inkstone
