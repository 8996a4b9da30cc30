#include "rl/policy_rollouts.h"

#include "sampler/diffusion_rollout.h"
#include "sampler/text_samples.h"

namespace inkstone {

PolicyRollouts policy_rollouts(LanguageModel model, const Config& config, const Tokenizer& tokenizer) {
  const auto objective = make_policy_objective(config, tokenizer);
  PolicyRollouts out;
  if (objective->needs().mask == MaskMode::causal) {
    out.generate = [model, &tokenizer](const std::vector<std::vector<int32_t>>& prompts,
                                       const RolloutOptions& options, int64_t first_group) mutable {
      return generate_rollouts(model, tokenizer, prompts, options, first_group);
    };
    return out;
  }
  const DiffusionProcess process = diffusion_process_for(*objective, config, tokenizer, model->vocab_size());
  const DiffusionSampleOptions denoising = diffusion_sample_options(config.sample);
  out.generate = [model, &tokenizer, process, denoising](const std::vector<std::vector<int32_t>>& prompts,
                                                         const RolloutOptions& options, int64_t first_group) mutable {
    return generate_diffusion_rollouts(model, process, tokenizer, prompts, options, denoising, first_group);
  };
  out.keyed_rows = true;
  return out;
}

}  // namespace inkstone
