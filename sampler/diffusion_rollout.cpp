#include "sampler/diffusion_rollout.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/counter_hash.h"
#include "core/errors.h"
#include "sampler/diffusion_canvas.h"

namespace inkstone {

Rollouts generate_diffusion_rollouts(LanguageModel& model, const DiffusionProcess& process, const Tokenizer& tokenizer,
                                     const std::vector<std::vector<int32_t>>& prompts, const RolloutOptions& options,
                                     DiffusionSampleOptions denoising, int64_t first_group) {
  const int64_t group = options.group_size;
  std::vector<CanvasRow> layouts;
  for (const auto& prompt : prompts) layouts.push_back(prefix_row(prompt, options.max_new_tokens));
  const DiffusionCanvas canvas = make_canvas(layouts, group);
  const int64_t positions = canvas.tokens.size(1) + (denoising.method == DiffusionMethod::adaptive ? 1 : 0);
  if (positions > model->config().max_seq_len)
    throw InputError(fmt::format("a rollout canvas of {} positions (the longest prompt and rl.max_new_tokens) is "
                                 "longer than model.max_seq_len = {}",
                                 positions, model->config().max_seq_len));
  denoising.filter = options.sampling;
  denoising.seed = options.seed;
  denoising.first_sequence = first_group * group;
  const auto device = model->parameters().front().device();
  const DiffusionSampleResult result = sample_diffusion(model_denoiser(model, process), process, canvas, denoising, device);

  Rollouts out;
  const int64_t rows = canvas.tokens.size(0);
  const auto tokens = result.tokens.contiguous();
  const auto open = canvas.fixed.logical_not().contiguous();
  const auto tokens_at = tokens.accessor<int64_t, 2>();
  const auto open_at = open.accessor<bool, 2>();
  auto groups = torch::empty({rows}, torch::kLong);
  auto keys = torch::empty({rows}, torch::kLong);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> text;
    bool ended = false;
    for (int64_t i = 0; i < tokens.size(1) && !ended; ++i) {
      if (!open_at[r][i]) continue;
      const auto id = static_cast<int32_t>(tokens_at[r][i]);
      ended = std::find(options.end_ids.begin(), options.end_ids.end(), id) != options.end_ids.end();
      if (!ended) text.push_back(id);
    }
    std::string completion = tokenizer.decode(text);
    for (const auto& stop : options.stop) {
      const auto at = completion.find(stop);
      if (at != std::string::npos) {
        completion.resize(at + stop.size());
        ended = true;
      }
    }
    out.completions.push_back(completion);
    out.lengths.push_back(static_cast<int64_t>(text.size()));
    out.truncated.push_back(!ended);
    const int64_t sequence = denoising.first_sequence + r;
    groups[r] = first_group + r / group;
    // The likelihood's noise for this completion: its own stream, apart from the rollout's draws.
    keys[r] = static_cast<int64_t>(
        counter_hash({static_cast<uint64_t>(options.seed), static_cast<uint64_t>(sequence), 0x6c696b65ULL}) >> 1);
  }
  out.generated_tokens = open.sum().item<int64_t>();
  out.seconds = result.seconds;
  out.tokens_per_s = static_cast<double>(out.generated_tokens) / std::max(result.seconds, 1e-9);
  // Clones: the sampler's tensors are inference tensors, which autograd may not save.
  out.batch.tokens = tokens.clone().to(device);
  out.batch.real = torch::ones_like(open).to(device);
  if (denoising.record_trajectory) {
    const int64_t transitions = result.transition_times.size(0);
    auto& rollout = out.batch.rollout;
    rollout.trajectory = result.trajectory.clone().to(device);
    rollout.transition_times = result.transition_times.expand({rows, transitions}).contiguous().to(device);
    rollout.transition_levels = result.transition_levels.expand({rows, transitions, 6}).contiguous().to(device);
    rollout.rollout_log_probs = result.log_probs.to(torch::kFloat).to(device);
  }
  out.batch.rollout.policy = open.to(device);
  out.batch.rollout.groups = groups.to(device);
  out.batch.rollout.noise_keys = keys.to(device);
  return out;
}

}  // namespace inkstone
