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
  options.seed = sample.seed;
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
  options.min_p = sample.min_p;
  options.fused = sample.fused;
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
  std::vector<CanvasRow> layouts;
  for (const auto& prompt : prompts)
    layouts.push_back(prefix_row(tokenizer.encode(prompt), config.sample.max_new_tokens));
  const DiffusionCanvas canvas = make_canvas(layouts, 1);
  const DiffusionProcess process = diffusion_process_for(objective, config, tokenizer, model->vocab_size());
  const auto done =
      sample_diffusion(model_denoiser(model), process, canvas, diffusion_sample_options(config.sample), device);
  for (int64_t r = 0; r < done.tokens.size(0); ++r) {
    const auto generated = done.tokens[r].masked_select(canvas.fixed[r].logical_not()).contiguous();
    const int64_t* first = generated.data_ptr<int64_t>();
    const std::vector<int32_t> ids(first, first + generated.numel());
    out.emplace_back(prompts[static_cast<size_t>(r)], tokenizer.decode(ids, false));
  }
  return out;
}

}  // namespace inkstone
