#include "train/resume_check.h"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>

#include "config/config_schema.h"
#include "core/errors.h"

namespace inkstone {
namespace {

// Whole sections and single keys a resumed run may change; every other key is the run's identity.
constexpr std::array<std::string_view, 3> kFreeSections = {"distributed", "sample", "metrics"};
constexpr std::array<std::string_view, 20> kFreeKeys = {
    "run.name",           "run.run_dir",        "run.device",           "run.threads",
    "train.steps",        "train.grad_accum",   "train.log_interval", "train.eval_interval",  "train.eval_batches",
    "train.checkpoint_interval", "train.keep_checkpoints", "train.max_bad_steps", "train.activation_checkpointing",
    "train.spike_window", "train.spike_loss_z", "train.spike_grad_z",
    "rl.eval_prompts",
    "rl.eval_samples",    "rl.eval_temperature", "rl.eval_path"};

bool may_change(const FieldSpec& field) {
  const std::string name = field.name();
  return std::find(kFreeSections.begin(), kFreeSections.end(), field.section) != kFreeSections.end() ||
         std::find(kFreeKeys.begin(), kFreeKeys.end(), name) != kFreeKeys.end();
}

}  // namespace

std::vector<SettingChange> check_resume_config(const Config& saved, const Config& resumed,
                                               const std::string& origin) {
  Config before = saved;
  Config after = resumed;
  std::vector<SettingChange> changes;
  for (const auto& field : config_schema()) {
    SettingChange change{field.name(), field_to_toml(before, field), field_to_toml(after, field)};
    if (change.before == change.after) continue;
    if (!may_change(field))
      throw InputError(fmt::format("{} was trained with {} = {}, the config asks for {}: a resumed run cannot change "
                                   "that (set it back, or start a new run)",
                                   origin, change.key, change.before, change.after));
    changes.push_back(std::move(change));
  }
  return changes;
}

void print_setting_changes(const std::vector<SettingChange>& changes) {
  for (const auto& c : changes) fmt::print("resume: {} {} -> {}\n", c.key, c.before, c.after);
}

}  // namespace inkstone
