#include "sampler/rollout.h"

#include <algorithm>

#include "sampler/ar_sampler.h"

namespace inkstone {
namespace {

// True once a stop string appears in the decoded tail. Every token decodes to at least one byte, so the last
// `longest` tokens cover any stop string that ends in the newest one; earlier ones were seen at earlier steps.
std::function<bool(const std::vector<int32_t>&)> stop_string_check(const Tokenizer& tokenizer,
                                                                   const std::vector<std::string>& stop) {
  if (stop.empty()) return {};
  size_t longest = 0;
  for (const auto& s : stop) longest = std::max(longest, s.size());
  return [&tokenizer, stop, longest](const std::vector<int32_t>& generated) {
    const size_t tail = std::min(longest, generated.size());
    const std::string text = tokenizer.decode(std::vector<int32_t>(generated.end() - tail, generated.end()));
    return std::any_of(stop.begin(), stop.end(), [&](const std::string& s) { return text.find(s) != text.npos; });
  };
}

}  // namespace

Rollouts generate_rollouts(LanguageModel& model, const Tokenizer& tokenizer,
                           const std::vector<std::vector<int32_t>>& prompts, const RolloutOptions& options,
                           int64_t first_group, KeptRowDecoder* kept) {
  ArSampleOptions sample;
  sample.num_samples = options.group_size;
  sample.max_new_tokens = options.max_new_tokens;
  sample.sampling = options.sampling;
  sample.seed = options.seed;
  sample.end_ids = options.end_ids;
  sample.decode = options.decode;
  sample.max_rows = options.max_rows;
  sample.continuous = options.continuous;
  sample.first_prompt = first_group;  // a completion's draws follow its group, not its place in this call
  sample.stop_when = stop_string_check(tokenizer, options.stop);
  const ArSampleResult result = sample_autoregressive(model, prompts, sample, kept);

  Rollouts out;
  out.generated_tokens = result.generated_tokens;
  out.seconds = result.seconds;
  out.tokens_per_s = result.tokens_per_s;
  const int64_t rows = static_cast<int64_t>(result.samples.size());
  int64_t width = 0;
  for (const auto& s : result.samples)
    width = std::max<int64_t>(width, static_cast<int64_t>(prompts[s.prompt_index].size() + s.tokens.size()));

  auto tokens = torch::zeros({rows, width}, torch::kLong);
  auto real = torch::zeros({rows, width}, torch::kBool);
  auto policy = torch::zeros({rows, width}, torch::kBool);
  auto log_probs = torch::zeros({rows, width}, torch::kFloat);
  auto groups = torch::empty({rows}, torch::kLong);
  auto tokens_at = tokens.accessor<int64_t, 2>();
  auto real_at = real.accessor<bool, 2>();
  auto policy_at = policy.accessor<bool, 2>();
  auto log_probs_at = log_probs.accessor<float, 2>();
  auto groups_at = groups.accessor<int64_t, 1>();
  for (int64_t r = 0; r < rows; ++r) {
    const ArSample& s = result.samples[r];
    const auto& prompt = prompts[s.prompt_index];
    const int64_t prompt_len = static_cast<int64_t>(prompt.size());
    for (int64_t t = 0; t < prompt_len; ++t) {
      tokens_at[r][t] = prompt[t];
      real_at[r][t] = true;
    }
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int64_t t = prompt_len + static_cast<int64_t>(i);
      tokens_at[r][t] = s.tokens[i];
      real_at[r][t] = true;
      policy_at[r][t] = true;
      log_probs_at[r][t] = s.log_probs[i];
    }
    groups_at[r] = first_group + s.prompt_index;
    out.completions.push_back(tokenizer.decode(s.tokens));
    out.lengths.push_back(static_cast<int64_t>(s.tokens.size()));
    out.truncated.push_back(s.finish == FinishReason::length);
  }

  const auto device = model->parameters().front().device();
  out.batch.tokens = tokens.to(device);
  out.batch.real = real.to(device);
  out.batch.rollout.policy = policy.to(device);
  out.batch.rollout.rollout_log_probs = log_probs.to(device);
  out.batch.rollout.groups = groups.to(device);
  return out;
}

}  // namespace inkstone
