// What rl.* describes, as the options of the pieces that RL training and `inkstone eval` share: the problem
// sets, the held-out evaluation, the weighted rewards.
#pragma once
#include <vector>

#include "config/config.h"
#include "rl/policy_eval.h"
#include "rl/task.h"

namespace inkstone {

// The problems rl.* describes: the training ones, or the held-out ones (rl.eval_path, rl.eval_seed).
TaskOptions task_options(const RlConfig& rl, bool held_out);

// How rl.* evaluates a policy: the first rl.eval_prompts held-out problems, rl.eval_samples samples each at
// rl.eval_temperature, always with the same sampling seed so that evaluations differ by the policy only.
PolicyEvalOptions policy_eval_options(const Config& config);

// rl.rewards entries "name" or "name=weight" as reward functions of rl.task; InputError for a malformed entry.
std::vector<WeightedReward> weighted_rewards(const RlConfig& rl);

// rl.* checked whatever the objective (a run on windows keeps its [rl] for `inkstone eval --task`): a registered
// rl.task, an rl.prompt_template with {question}, rl.rewards that parse for that task. InputError naming the key;
// no problem file is read.
void check_rl_settings(const RlConfig& rl);

}  // namespace inkstone
