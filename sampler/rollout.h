// RL rollouts: G completions per prompt from the AR sampler, laid out as a training batch of prompt + completion
// rows with the policy mask and the sampler's per-token log-probs (ℓ^roll of docs/rl.md, "Policy log-probs").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/batch.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "sampler/ar_sampler.h"
#include "sampler/sampling.h"

namespace inkstone {

struct RolloutOptions {
  int64_t group_size = 8;
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  int64_t seed = 0;
  std::vector<std::string> stop;  // a completion ends after the first of these appears in its decoded text
  std::vector<int32_t> end_ids;   // ... or after drawing one of these ids (PromptFormat::end_ids: eos, end of turn)
  DecodeMode decode = DecodeMode::automatic;
  int64_t max_rows = 0;           // rows decoded at once (ArSampleOptions::max_rows); 0: every completion
  bool continuous = true;         // ArSampleOptions::continuous
  // The caller's kept decoder serves this call (RL's training rollouts, one call per step with the same rows);
  // false: the call's own (evaluation, whose rows differ, would replace the kept one every time).
  bool keep_decoder = false;
};

struct Rollouts {
  // Rows in prompt-major order (group g = rows g·G .. g·G+G−1), right-padded to the longest row, on the model's
  // device; rollout.policy, rollout.rollout_log_probs and rollout.groups are set.
  Batch batch;
  std::vector<std::string> completions;  // decoded, special tokens dropped
  std::vector<int64_t> lengths;          // completion tokens |y_i|
  std::vector<bool> truncated;           // reached max_new_tokens without eos or a stop string
  int64_t generated_tokens = 0;
  double seconds = 0;
  double tokens_per_s = 0;
};

// Prompts are token ids (non-empty). Group ids are first_group + prompt index, so batches drawn at different
// times never share one. Completions end at an end id, a stop string, or max_new_tokens. `kept`: the decoder
// kept across calls (sample_autoregressive).
Rollouts generate_rollouts(LanguageModel& model, const Tokenizer& tokenizer,
                           const std::vector<std::vector<int32_t>>& prompts, const RolloutOptions& options,
                           int64_t first_group = 0, KeptRowDecoder* kept = nullptr);

}  // namespace inkstone
