// RL tasks: where prompts come from (a PromptSource per task) and how a completion is scored (named reward
// functions combined by weight). Implementations live beside this header, one file per task.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dataset/prompt_source.h"

namespace inkstone {

struct TaskOptions {
  std::string name;             // gsm8k | math | arithmetic | countdown
  std::string path;             // gsm8k: a jsonl file; math: a json array file; procedural tasks: unused
  int64_t size = 10000;         // procedural tasks: number of distinct problems
  int64_t difficulty = 1;       // procedural tasks: the difficulty knob (terms, digits, numbers)
  uint64_t seed = 0;            // procedural tasks: problem i is a pure function of (seed, i)
  // How a problem is shown to the policy; "{question}" is replaced by the problem text.
  std::string prompt_template = "{question}\n";
};

// InputError for an unknown task or a missing / malformed file (naming file:line).
std::unique_ptr<PromptSource> make_prompt_source(const TaskOptions& options);

// One named reward on one completion. `parsed` is false when no answer could be extracted (reward 0 then);
// the trainer counts those.
struct RewardResult {
  double value = 0.0;
  bool parsed = false;
  std::string extracted;  // the answer as extracted, for logs and diversity metrics
};

class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  virtual std::string name() const = 0;
  virtual RewardResult score(const Prompt& prompt, const std::string& completion) const = 0;
};

// correct: the task's exact verifier (1 or 0); format: 1 when an answer can be extracted at all.
// InputError for an unknown name.
std::unique_ptr<RewardFunction> make_reward_function(const std::string& name, const std::string& task_name);

struct WeightedReward {
  std::shared_ptr<const RewardFunction> function;
  double weight = 1.0;
};

struct CombinedReward {
  double total = 0.0;                   // Σ weight · value
  std::vector<RewardResult> parts;      // in the order of the weighted rewards
  bool correct = false;                 // the "correct" part, when present, scored 1
};
CombinedReward combine_rewards(const std::vector<WeightedReward>& rewards, const Prompt& prompt,
                               const std::string& completion);

}  // namespace inkstone
