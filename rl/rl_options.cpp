// rl.* as task, evaluation and reward options (rl/rl_options.h).
#include "rl/rl_options.h"

#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "rl/task_registry.h"

namespace inkstone {

TaskOptions task_options(const RlConfig& rl, bool held_out) {
  TaskOptions o;
  o.name = rl.task;
  o.path = held_out && !rl.eval_path.empty() ? rl.eval_path : rl.task_path;
  o.size = rl.task_size;
  o.difficulty = rl.difficulty;
  o.seed = static_cast<uint64_t>(held_out ? rl.eval_seed : rl.task_seed);
  o.prompt_template = rl.prompt_template;
  return o;
}

PolicyEvalOptions policy_eval_options(const Config& config) {
  PolicyEvalOptions options;
  options.problems = config.rl.eval_prompts;
  options.rollout.group_size = config.rl.eval_samples;
  options.rollout.max_new_tokens = config.rl.max_new_tokens;
  options.rollout.sampling.temperature = config.rl.eval_temperature;
  options.rollout.seed = config.run.seed;
  options.rollout.stop = config.rl.stop;
  options.chat = config.chat;
  return options;
}

std::vector<WeightedReward> weighted_rewards(const RlConfig& rl) {
  std::vector<WeightedReward> rewards;
  for (const auto& entry : rl.rewards) {
    const auto eq = entry.find('=');
    WeightedReward reward;
    if (eq != std::string::npos) {
      try {
        size_t used = 0;
        reward.weight = std::stod(entry.substr(eq + 1), &used);
        if (used != entry.size() - eq - 1 || !std::isfinite(reward.weight)) throw std::invalid_argument(entry);
      } catch (const std::exception&) {
        throw InputError(
            fmt::format("rl.rewards entry '{}' must be \"name\" or \"name=weight\" with a finite weight", entry));
      }
    }
    try {
      reward.function = make_reward_function(entry.substr(0, eq), rl.task);
    } catch (const InputError& e) {
      throw InputError(fmt::format("rl.rewards entry '{}': {}", entry, e.what()));
    }
    rewards.push_back(reward);
  }
  if (rewards.empty()) throw InputError("rl.rewards is empty: name at least one reward (e.g. \"correct\")");
  return rewards;
}

void check_rl_settings(const RlConfig& rl) {
  find_task(rl.task);
  if (rl.prompt_template.find("{question}") == std::string::npos)
    throw InputError(fmt::format("rl.prompt_template = '{}' has no {{question}} for the problem", rl.prompt_template));
  weighted_rewards(rl);
}

}  // namespace inkstone
