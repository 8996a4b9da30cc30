// A sweep (docs/sweeps.md): one base config, named variants (sets of `--set` overrides), seeds, and a budget in
// steps, tokens or FLOPs; every (variant, seed) is one training run in its own folder.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "config/config.h"

namespace inkstone {

enum class BudgetKind { steps, tokens, flops };

struct SweepVariant {
  std::string name;
  std::vector<std::string> overrides;  // section.key=value
};

struct SweepSpec {
  std::filesystem::path file;  // the sweep file (relative paths in it are relative to its folder)
  std::filesystem::path base_config;
  std::filesystem::path out_dir;    // default: runs/sweeps/<file stem>
  std::vector<int64_t> seeds;       // run.seed (weights) of seed index i
  std::vector<int64_t> data_seeds;  // data.seed (data order) of seed index i; same length as seeds
  BudgetKind budget = BudgetKind::steps;
  double budget_amount = 0;            // steps, tokens or training FLOPs per run
  std::vector<std::string> metrics;    // tags compared at each run's last step (val/loss, ...)
  std::vector<std::string> common;     // overrides every variant starts from ([sweep] set)
  std::vector<SweepVariant> variants;  // the first is the baseline unless `baseline` names another
  std::string baseline;
  double alpha = 0.05;  // family-wise level of the corrected tests
};

// Reads a sweep file; an unknown key, a missing [sweep] key, duplicate variant names, seed lists of different
// lengths or a non-positive budget are an InputError naming the file and key.
SweepSpec load_sweep(const std::filesystem::path& file);

struct SweepRun {
  std::string variant;
  int seed_index = 0;
  int64_t seed = 0, data_seed = 0;
  int64_t steps = 0;
  std::filesystem::path run_dir;       // OUT/<variant>/seed-<seed index>
  std::vector<std::string> overrides;  // the common ones, the variant's, then run.seed, data.seed, train.steps
};

// Training FLOPs of one token for a config (3 x the model's forward FLOPs at data.seq_len).
using TrainingFlopsPerToken = std::function<double(const Config&)>;

// Every run of the sweep, variant-major. A budget in tokens gives each variant floor(tokens / (batch x seq_len))
// steps; in FLOPs, floor(flops / (batch x seq_len x flops_per_token)): iso-compute across variants whose cost
// per token differs. A budget that buys no step is an InputError naming the variant.
std::vector<SweepRun> plan_sweep(const SweepSpec& spec, const TrainingFlopsPerToken& flops_per_token);

// The order a sweep trains its runs in: seed-major (every variant of seed 0, then of seed 1, ...), so that a sweep
// stopped early holds whole seeds, which a file listing only those seeds reports on (docs/sweeps.md).
std::vector<const SweepRun*> training_order(const std::vector<SweepRun>& runs);

}  // namespace inkstone
