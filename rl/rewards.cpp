// The named reward functions and their weighted sum (rl/task.h).
#include <fmt/format.h>

#include "core/errors.h"
#include "rl/task_registry.h"

namespace inkstone {
namespace {

// 1 when the task's verifier accepts the extracted answer. Extraction uses the task's fallbacks (the last number
// for numeric tasks), so `parsed` is false only when nothing answer-like is in the completion.
class CorrectReward final : public RewardFunction {
 public:
  explicit CorrectReward(const TaskEntry& task) : task_(task) {}
  std::string name() const override { return "correct"; }
  RewardResult score(const Prompt& prompt, const std::string& completion) const override {
    RewardResult result;
    const auto answer = task_.extract_answer(completion);
    if (!answer) return result;
    result.parsed = true;
    result.extracted = *answer;
    result.value = task_.is_correct(*answer, prompt.answer) ? 1.0 : 0.0;
    return result;
  }

 private:
  const TaskEntry& task_;
};

// 1 when the answer is written in the task's own format ("#### " or \boxed{}), right or wrong. The fallbacks
// do not count here: nearly every completion holds some number, which would make this reward constant.
class FormatReward final : public RewardFunction {
 public:
  explicit FormatReward(const TaskEntry& task) : task_(task) {}
  std::string name() const override { return "format"; }
  RewardResult score(const Prompt&, const std::string& completion) const override {
    RewardResult result;
    const auto answer = task_.extract_formatted_answer(completion);
    if (!answer) return result;
    result.parsed = true;
    result.extracted = *answer;
    result.value = 1.0;
    return result;
  }

 private:
  const TaskEntry& task_;
};

}  // namespace

std::unique_ptr<RewardFunction> make_reward_function(const std::string& name, const std::string& task_name) {
  const TaskEntry& task = find_task(task_name);
  if (name == "correct") return std::make_unique<CorrectReward>(task);
  if (name == "format") return std::make_unique<FormatReward>(task);
  throw InputError(fmt::format("unknown reward '{}' (expected correct or format)", name));
}

CombinedReward combine_rewards(const std::vector<WeightedReward>& rewards, const Prompt& prompt,
                               const std::string& completion) {
  CombinedReward combined;
  for (const WeightedReward& reward : rewards) {
    RewardResult part = reward.function->score(prompt, completion);
    combined.total += reward.weight * part.value;
    if (reward.function->name() == "correct" && part.value == 1.0) combined.correct = true;
    combined.parts.push_back(std::move(part));
  }
  return combined;
}

}  // namespace inkstone
