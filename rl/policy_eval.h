// Held-out evaluation of a policy on a task: pass@1 as the mean over k samples, pass@k by the unbiased
// estimator, and how diverse the answers are.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "rl/task.h"
#include "rl/policy_rollouts.h"

namespace inkstone {

// Chen et al. 2021 (Codex), eq. 1: 1 − C(n−c, k)/C(n, k) for c correct of n samples, as the product
// Π_{i=n−c+1..n} (1 − k/i) that never forms the large binomials.
double pass_at_k(int64_t n, int64_t c, int64_t k);

struct PolicyEvalOptions {
  int64_t problems = 64;          // `problems` of the source from first_problem on, the same ones every time
  int64_t first_problem = 0;
  int64_t prompts_per_batch = 16;
  RolloutOptions rollout;         // group_size is the k samples per problem; end_ids come from `chat`
  ChatConfig chat;                // how problems are rendered (dataset/prompt_format.h)
};

// pass@1, pass@k for k = 2, 4, ... up to the sample count, mean distinct correct answers and distinct
// completions per problem, the fraction of samples without a parsable answer.
// Problem p's samples are rollout group p, so a diffusion policy's draws (keyed by row) do not depend on how the
// problems are batched or shared over ranks.
std::map<std::string, double> evaluate_policy(const PolicyRollouts& policy, const Tokenizer& tokenizer,
                                              const PromptSource& problems,
                                              const std::vector<WeightedReward>& rewards,
                                              const PolicyEvalOptions& options);

}  // namespace inkstone
