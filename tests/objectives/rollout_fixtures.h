// Shared pieces of the RL objectives' tests (and the rollout ones'): a tiny policy and rollout batches written out
// by hand.
#pragma once
#include <vector>

#include <torch/torch.h>

#include "config/config.h"
#include "core/batch.h"
#include "dataset/byte_tokenizer.h"
#include "models/language_model.h"
#include "objectives/policy_log_probs.h"
#include "tests/fixtures.h"

namespace inkstone::testing {

// The tokenizer the RL objectives are built with (a causal policy reads none of it).
inline const Tokenizer& policy_tokenizer() {
  static const ByteTokenizer tokenizer;
  return tokenizer;
}

inline ModelConfig tiny_policy_config() { return tiny_model_config(/*init_std=*/0.3); }

inline LanguageModel tiny_policy(int64_t vocab, uint64_t seed = 5) {
  torch::manual_seed(seed);
  return build_language_model(tiny_policy_config(), vocab);
}

struct RolloutRow {
  std::vector<int64_t> prompt;
  std::vector<int64_t> completion;
  double reward = 0;
  int64_t group = 0;
};

// Right-padded rows with the policy mask, rewards and groups; old log-probs are the model's own (on-policy).
inline Batch rollout_batch(LanguageModelImpl& model, const std::vector<RolloutRow>& rows, double temperature = 1.0) {
  int64_t width = 0;
  for (const auto& r : rows) width = std::max<int64_t>(width, r.prompt.size() + r.completion.size());
  const int64_t n = static_cast<int64_t>(rows.size());
  Batch batch;
  batch.tokens = torch::zeros({n, width}, torch::kLong);
  batch.real = torch::zeros({n, width}, torch::kBool);
  batch.rollout.policy = torch::zeros({n, width}, torch::kBool);
  batch.rollout.rewards = torch::empty({n}, torch::kFloat);
  batch.rollout.groups = torch::empty({n}, torch::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const auto& r = rows[i];
    int64_t t = 0;
    for (int64_t id : r.prompt) batch.tokens[i][t++] = id;
    for (int64_t id : r.completion) {
      batch.tokens[i][t] = id;
      batch.rollout.policy[i][t++] = true;
    }
    batch.real[i].narrow(0, 0, t).fill_(true);
    batch.rollout.rewards[i] = r.reward;
    batch.rollout.groups[i] = r.group;
  }
  torch::NoGradGuard no_grad;
  batch.rollout.old_log_probs = policy_log_probs(model, batch, temperature, /*logit_chunk_mib=*/256).log_probs;
  return batch;
}

// Random rows: `groups` groups of `group_size`, prompts of 1–3 tokens, completions of 1–5 tokens, the given rewards.
inline std::vector<RolloutRow> random_rows(int64_t groups, int64_t group_size, int64_t vocab,
                                           const std::vector<double>& rewards, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<RolloutRow> rows;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t prompt_len = torch::randint(1, 4, {1}).item<int64_t>();
    const auto prompt = torch::randint(0, vocab, {prompt_len}, torch::kLong);
    for (int64_t i = 0; i < group_size; ++i) {
      RolloutRow row;
      row.prompt.assign(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + prompt_len);
      const int64_t len = torch::randint(1, 6, {1}).item<int64_t>();
      const auto completion = torch::randint(0, vocab, {len}, torch::kLong);
      row.completion.assign(completion.data_ptr<int64_t>(), completion.data_ptr<int64_t>() + len);
      row.reward = rewards[static_cast<size_t>(g * group_size + i)];
      row.group = g;
      rows.push_back(row);
    }
  }
  return rows;
}

// d(loss)/d(parameters), flattened into one vector.
inline torch::Tensor flat_gradient(LanguageModelImpl& model, const torch::Tensor& loss) {
  auto params = model.parameters();
  auto grads = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  std::vector<torch::Tensor> flat;
  for (size_t i = 0; i < grads.size(); ++i)
    flat.push_back(grads[i].defined() ? grads[i].reshape(-1) : torch::zeros({params[i].numel()}));
  return torch::cat(flat);
}

}  // namespace inkstone::testing
