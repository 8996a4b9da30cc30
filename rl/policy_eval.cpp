#include "rl/policy_eval.h"

#include <algorithm>
#include <set>

#include "dataset/prompt_format.h"

namespace inkstone {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n - c < k) return 1.0;
  double all_fail = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) all_fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - all_fail;
}

std::map<std::string, double> evaluate_policy(const PolicyRollouts& policy, const Tokenizer& tokenizer,
                                              const PromptSource& problems,
                                              const std::vector<WeightedReward>& rewards,
                                              const PolicyEvalOptions& options) {
  const int64_t end = std::min(options.first_problem + options.problems, problems.size());
  const int64_t n = options.rollout.group_size;
  const PromptFormat format(options.chat, tokenizer);
  RolloutOptions rollout = options.rollout;
  rollout.end_ids = format.end_ids();
  std::vector<int64_t> correct_per_problem;
  double distinct_correct = 0, distinct_completions = 0, unparsed = 0;
  for (int64_t first = options.first_problem; first < end; first += options.prompts_per_batch) {
    const int64_t last = std::min(end, first + options.prompts_per_batch);
    std::vector<Prompt> prompts;
    std::vector<std::vector<int32_t>> ids;
    for (int64_t p = first; p < last; ++p) {
      prompts.push_back(problems.get(p));
      ids.push_back(format.encode(prompts.back().text));
    }
    const Rollouts rollouts = policy.generate(ids, rollout, first);
    for (size_t p = 0; p < prompts.size(); ++p) {
      int64_t correct = 0;
      std::set<std::string> answers, completions;
      for (int64_t s = 0; s < n; ++s) {
        const std::string& completion = rollouts.completions[p * n + s];
        const CombinedReward reward = combine_rewards(rewards, prompts[p], completion);
        completions.insert(completion);
        if (!reward.parts.empty() && !reward.parts.front().parsed) ++unparsed;
        if (reward.correct) {
          ++correct;
          answers.insert(completion);
        }
      }
      correct_per_problem.push_back(correct);
      distinct_correct += static_cast<double>(answers.size());
      distinct_completions += static_cast<double>(completions.size());
    }
  }

  std::map<std::string, double> metrics;
  const double problems_done = std::max<double>(1.0, static_cast<double>(correct_per_problem.size()));
  for (int64_t k = 1; k <= n; k *= 2) {
    double sum = 0;
    for (int64_t c : correct_per_problem) sum += pass_at_k(n, c, k);
    metrics["pass@" + std::to_string(k)] = sum / problems_done;
  }
  metrics["distinct_correct_completions"] = distinct_correct / problems_done;
  metrics["distinct_completions"] = distinct_completions / problems_done;
  metrics["unparsed_fraction"] = unparsed / (problems_done * static_cast<double>(n));
  metrics["problems"] = static_cast<double>(correct_per_problem.size());
  return metrics;
}

}  // namespace inkstone
