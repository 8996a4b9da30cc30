// Samples of text prompts with a run's [sample] settings, whatever the objective: autoregressive continuation
// or diffusion denoising of a prefix. `inkstone sample` starts from these settings; a training run samples its
// metrics.sample_prompts with them (docs/observability.md, "Samples during training").
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "dataset/prompt_format.h"
#include "dataset/tokenizer.h"
#include "models/language_model.h"
#include "objectives/objective.h"
#include "sampler/ar_sampler.h"
#include "sampler/block_sampler.h"
#include "sampler/diffusion_sampler.h"

namespace inkstone {

// The [sample] section as sampler options (eager decoding unless sample.cuda_graphs).
ArSampleOptions ar_sample_options(const SampleConfig& sample, const PromptFormat& format);
DiffusionSampleOptions diffusion_sample_options(const SampleConfig& sample);
// Diffusion generation in blocks of sample.block_size, else of the run's diffusion.block_size; 0: the whole window.
int64_t generation_block_size(const SampleConfig& sample, const DiffusionConfig& diffusion);
// [sample] as block-sampler options for blocks of `block_size` (> 0), with the KV cache of committed blocks when
// the model was trained block-causal.
BlockSampleOptions block_sample_options(const SampleConfig& sample, int64_t block_size, const DiffusionProcess& process);

// One sample per prompt, (prompt, generated text) in prompt order, on the model's device with sample.seed: the
// same weights give the same texts. A diffusion objective denoises sample.max_new_tokens positions after the
// prompt (in blocks when generation_block_size > 0); an autoregressive one decodes up to that many.
std::vector<std::pair<std::string, std::string>> sample_texts(LanguageModel& model, const Objective& objective,
                                                              const Config& config, const Tokenizer& tokenizer,
                                                              const std::vector<std::string>& prompts,
                                                              torch::Device device);

}  // namespace inkstone
