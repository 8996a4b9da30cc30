// How a policy generates its rollouts, chosen once by the objective that trained it (rl.policy): a causal policy
// decodes left to right (sampler/rollout.h), a diffusion policy is denoised from its prompt with [sample]'s
// diffusion sampler and steps (sampler/diffusion_rollout.h). RL steps and the held-out evaluation call it alike.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "config/config.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "sampler/rollout.h"

namespace inkstone {

struct PolicyRollouts {
  // Completions of `prompts` (token ids), group ids from first_group. Every draw is keyed by (seed, global group,
  // row in it, position): ranks share the seed and number groups globally, and a completion is then the same on
  // any number of ranks.
  std::function<Rollouts(const std::vector<std::vector<int32_t>>& prompts, const RolloutOptions& options,
                         int64_t first_group)>
      generate;
};

// `model` and `tokenizer` must outlive the result.
PolicyRollouts policy_rollouts(LanguageModel model, const Config& config, const Tokenizer& tokenizer);

}  // namespace inkstone
