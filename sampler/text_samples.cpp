#include "sampler/text_samples.h"

#include "sampler/diffusion_canvas.h"

namespace inkstone {

ArSampleOptions ar_sample_options(const SampleConfig& sample, const PromptFormat& format) {
  ArSampleOptions options;
  options.num_samples = sample.num;
  options.max_new_tokens = sample.max_new_tokens;
  options.sampling.temperature = sample.temperature;
  options.sampling.top_k = sample.top_k;
  options.sampling.top_p = sample.top_p;
  options.sampling.min_p = sample.min_p;
  options.seed = sample.seed;
  options.max_rows = sample.batch_size;
  if (sample.cache_dtype == CacheFormat::bf16) options.cache_dtype = torch::kBFloat16;
  options.decode = sample.cuda_graphs ? DecodeMode::automatic : DecodeMode::growing_cache;
  options.end_ids = format.end_ids();
  return options;
}

DiffusionSampleOptions diffusion_sample_options(const SampleConfig& sample) {
  DiffusionSampleOptions options;
  options.steps = sample.steps;
  options.method = diffusion_method_from_name(sample.diffusion_sampler);
  options.noise_removal = noise_removal_from_name(sample.noise_removal);
  options.filter.temperature = sample.temperature;
  options.filter.top_k = sample.top_k;
  options.filter.top_p = sample.top_p;
  options.seed = sample.seed;
  options.filter.min_p = sample.min_p;
  options.confidence_threshold = sample.confidence_threshold;
  options.fused = sample.fused;
  options.posterior_dtype = sample.posterior == PosteriorPrecision::float32 ? torch::kFloat : torch::kDouble;
  return options;
}

int64_t generation_block_size(const SampleConfig& sample, const DiffusionConfig& diffusion) {
  return sample.block_size > 0 ? sample.block_size : diffusion.block_size;
}

BlockSampleOptions block_sample_options(const SampleConfig& sample, int64_t block_size,
                                        const DiffusionProcess& process) {
  BlockSampleOptions options;
  options.block_size = block_size;
  options.max_new_tokens = sample.max_new_tokens;
  options.use_cache = process.block_size > 0;
  options.approximate_cache = sample.approximate_cache;
  options.noisy_suffix = sample.noisy_suffix;
  options.per_block = diffusion_sample_options(sample);
  return options;
}

std::vector<std::pair<std::string, std::string>> sample_texts(LanguageModel& model, const Objective& objective,
                                                              const Config& config, const Tokenizer& tokenizer,
                                                              const std::vector<std::string>& prompts,
                                                              torch::Device device) {
  std::vector<std::pair<std::string, std::string>> out;
  if (objective.needs().mask == MaskMode::causal) {
    const PromptFormat format(config.chat, tokenizer);
    ArSampleOptions options = ar_sample_options(config.sample, format);
    options.num_samples = 1;
    std::vector<std::vector<int32_t>> ids;
    for (const auto& prompt : prompts) ids.push_back(format.encode(prompt));
    for (const ArSample& s : sample_autoregressive(model, ids, options).samples)
      out.emplace_back(prompts[static_cast<size_t>(s.prompt_index)], tokenizer.decode(s.tokens, false));
    return out;
  }
  const DiffusionProcess process = diffusion_process_for(objective, config, tokenizer, model->vocab_size());
  if (const int64_t block = generation_block_size(config.sample, config.diffusion); block > 0) {
    const BlockSampleOptions options = block_sample_options(config.sample, block, process);
    for (const auto& prompt : prompts) {
      const auto done = sample_in_blocks(model, process, tokenizer.encode(prompt), 1, options, device);
      out.emplace_back(prompt, tokenizer.decode(generated_until_end(done.tokens[0], done.fixed[0], process.end_id),
                                                false));
    }
    return out;
  }
  std::vector<CanvasRow> layouts;
  for (const auto& prompt : prompts)
    layouts.push_back(prefix_row(tokenizer.encode(prompt), config.sample.max_new_tokens));
  const DiffusionCanvas canvas = make_canvas(layouts, 1);
  const auto done =
      sample_diffusion(model_denoiser(model, process), process, canvas, diffusion_sample_options(config.sample), device);
  for (int64_t r = 0; r < done.tokens.size(0); ++r) {
    const auto ids = generated_until_end(done.tokens[r], canvas.fixed[r], process.end_id);
    out.emplace_back(prompts[static_cast<size_t>(r)], tokenizer.decode(ids, false));
  }
  return out;
}

}  // namespace inkstone
