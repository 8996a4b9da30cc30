#include "rl/policy_rollouts.h"

#include <fmt/format.h>

#include <memory>

#include "core/errors.h"

#include "sampler/diffusion_rollout.h"
#include "sampler/text_samples.h"

namespace inkstone {

PolicyRollouts policy_rollouts(LanguageModel model, const Config& config, const Tokenizer& tokenizer) {
  const auto objective = make_policy_objective(config, tokenizer);
  PolicyRollouts out;
  if (objective->needs().mask == MaskMode::causal) {
    // One decoder for the calls that ask to keep it (the training steps' rollouts, rl.keep_decoder): its cache and
    // CUDA graphs are made once (sampler/row_decoders.h).
    auto kept = std::make_shared<KeptRowDecoder>();
    out.generate = [model, &tokenizer, kept](const std::vector<std::vector<int32_t>>& prompts,
                                             const RolloutOptions& options, int64_t first_group) mutable {
      return generate_rollouts(model, tokenizer, prompts, options, first_group,
                               options.keep_decoder ? kept.get() : nullptr);
    };
    return out;
  }
  const DiffusionProcess process = diffusion_process_for(*objective, config, tokenizer, model->vocab_size());
  DiffusionSampleOptions denoising = diffusion_sample_options(config.sample);
  // Scored by its own transitions: the trajectory is kept, and the rollouts' filter must give every draw a
  // probability (rl.temperature and rl.top_p replace [sample]'s filter).
  denoising.record_trajectory = config.rl.likelihood == SequenceLikelihood::transitions;
  DiffusionSampleOptions as_rolled_out = denoising;
  as_rolled_out.filter.temperature = config.rl.temperature;
  as_rolled_out.filter.top_p = config.rl.top_p;
  as_rolled_out.filter.top_k = 0;
  try {
    check_trajectory_recording(as_rolled_out);
  } catch (const InputError& e) {
    throw InputError(fmt::format("rl.likelihood = \"transitions\": {} (sample.diffusion_sampler = '{}', "
                                 "sample.noise_removal = '{}', rl.top_p = {})",
                                 e.what(), config.sample.diffusion_sampler, config.sample.noise_removal,
                                 config.rl.top_p));
  }
  out.generate = [model, &tokenizer, process, denoising](const std::vector<std::vector<int32_t>>& prompts,
                                                         const RolloutOptions& options, int64_t first_group) mutable {
    return generate_diffusion_rollouts(model, process, tokenizer, prompts, options, denoising, first_group);
  };
  return out;
}

}  // namespace inkstone
