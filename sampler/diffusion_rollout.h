// RL rollouts of a diffusion policy (docs/rl.md, "Diffusion policies"): G completions per prompt denoised from the
// prompt, laid out as a training batch like the AR rollouts of sampler/rollout.h.
#pragma once
#include <cstdint>
#include <vector>

#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "sampler/diffusion_sampler.h"
#include "sampler/rollout.h"

namespace inkstone {

// Each prompt is followed by a canvas of generated positions, rows of one length (a shorter prompt gets more
// positions; at least options.max_new_tokens each), all of which the policy generated: the policy mask covers the
// whole canvas, since the likelihood of a denoised canvas is that of every position in it. A completion's text is
// the canvas up to its first end id (eos, end of turn) and then up to its first stop string; it is truncated when
// the canvas holds no end id. `denoising` says how (sampler, steps, noise removal, precision); its filter
// is options.sampling, its seed options.seed, and row r is sequence first_group·G + r of the draws, so a
// completion does not depend on the batch it is denoised in. rollout.noise_keys key the likelihood estimates'
// draws (objectives/diffusion_policy.h); with denoising.record_trajectory the batch also holds the trajectory and,
// as rollout_log_probs, the sampler's log-probabilities of its draws.
Rollouts generate_diffusion_rollouts(LanguageModel& model, const DiffusionProcess& process, const Tokenizer& tokenizer,
                                     const std::vector<std::vector<int32_t>>& prompts, const RolloutOptions& options,
                                     DiffusionSampleOptions denoising, int64_t first_group = 0);

}  // namespace inkstone
