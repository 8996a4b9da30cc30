// `inkstone sample --checkpoint PATH | --run-dir DIR [--prompt TEXT | --prompts-file F | --infill TEMPLATE]
//  [--num N] [--max-new-tokens T] [--temperature X] [--top-k K] [--top-p P] [--seed S] [--format text|jsonl]
//  [--steps T] [--sampler ancestral|confidence|adaptive] [--confidence-threshold C] [--block-size S [--no-cache]]
//  [--noise-removal ancestral|greedy|none] [--trace K] [--param-dtype fp32|bf16]`
// The checkpoint's objective picks the sampler: autoregressive decoding, or diffusion denoising.
// Options left out take the run's [sample] values.
#include <fstream>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/module_weights.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "core/progress.h"
#include "dataset/prompt_format.h"
#include "sampler/ar_sampler.h"
#include "sampler/diffusion_canvas.h"
#include "sampler/diffusion_sampler.h"
#include "sampler/rollout.h"
#include "sampler/text_samples.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace inkstone::cli {
namespace {

struct SampleOptions {
  std::string checkpoint;
  std::optional<std::string> prompt;
  std::string prompts_file;
  std::optional<int64_t> num, max_new_tokens, top_k, seed;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> steps, block_size;
  bool no_cache = false;
  bool approximate_cache = false;
  bool noisy_suffix = false;
  std::optional<std::string> diffusion_sampler, noise_removal;
  std::string infill;
  int64_t trace = 0;
  std::string format = "text";
  std::string device;
  bool keep_special = false;
  bool truncate_prompts = false;
  std::optional<double> min_p, confidence_threshold;
  std::optional<std::string> posterior, cache_dtype;
  std::optional<int64_t> batch_size;
  bool eager = false;
  std::optional<std::string> param_dtype;
};

// The run's [sample] settings with the options given on the command line in their place.
SampleConfig with_overrides(const SampleOptions& o, SampleConfig sample) {
  sample.num = o.num.value_or(sample.num);
  sample.max_new_tokens = o.max_new_tokens.value_or(sample.max_new_tokens);
  sample.temperature = o.temperature.value_or(sample.temperature);
  sample.top_k = o.top_k.value_or(sample.top_k);
  sample.top_p = o.top_p.value_or(sample.top_p);
  sample.seed = o.seed.value_or(sample.seed);
  sample.steps = o.steps.value_or(sample.steps);
  sample.diffusion_sampler = o.diffusion_sampler.value_or(sample.diffusion_sampler);
  sample.noise_removal = o.noise_removal.value_or(sample.noise_removal);
  sample.min_p = o.min_p.value_or(sample.min_p);
  sample.confidence_threshold = o.confidence_threshold.value_or(sample.confidence_threshold);
  sample.approximate_cache = sample.approximate_cache || o.approximate_cache;
  sample.noisy_suffix = sample.noisy_suffix || o.noisy_suffix;
  if (o.posterior) sample.posterior = choice_named<PosteriorPrecision>(*o.posterior).value();
  if (o.cache_dtype) sample.cache_dtype = choice_named<CacheFormat>(*o.cache_dtype).value();
  sample.block_size = o.block_size.value_or(sample.block_size);
  sample.batch_size = o.batch_size.value_or(sample.batch_size);
  return sample;
}

std::vector<std::string> read_prompts(const SampleOptions& o, const SampleConfig& defaults) {
  if (!o.prompts_file.empty()) {
    std::ifstream in = open_input_file(o.prompts_file, "prompts file");
    std::vector<std::string> prompts;
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
    if (prompts.empty()) throw InputError(fmt::format("prompts file '{}' has no prompts", o.prompts_file));
    return prompts;
  }
  return {o.prompt.value_or(defaults.prompt)};
}

void print_sample(const SampleOptions& o, size_t index, const std::string& prompt, const std::string& text,
                  const std::vector<int32_t>& tokens, nlohmann::json extra) {
  if (o.format == "jsonl") {
    nlohmann::json line = {{"prompt", prompt}, {"text", text}, {"tokens", tokens}};
    line.update(extra);
    fmt::print("{}\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  std::string facts;
  for (const auto& [key, value] : extra.items()) {
    if (key == "prompt_index") continue;
    facts += fmt::format(", {} {}", key,
                         value.is_number_float() ? fmt::format("{:.3f}", value.get<double>())
                         : value.is_string()     ? value.get<std::string>()
                                                 : value.dump());
  }
  fmt::print("--- sample {} ({} tokens{}) ---\n{}{}\n", index + 1, tokens.size(), facts, prompt, text);
}

// --truncate-prompts: a prompt longer than the context leaves room for keeps its last tokens (the ones nearest the
// continuation), said on stderr; without the option the sampler refuses it.
void truncate_to_context(std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens, int64_t max_seq_len) {
  const int64_t room = max_seq_len - max_new_tokens;
  if (room < 1)
    throw InputError(fmt::format("max_new_tokens = {} leaves no room for a prompt in model.max_seq_len = {}",
                                 max_new_tokens, max_seq_len));
  for (size_t p = 0; p < prompts.size(); ++p) {
    auto& ids = prompts[p];
    if (static_cast<int64_t>(ids.size()) <= room) continue;
    fmt::print(stderr, "prompt {}: {} tokens truncated to its last {}\n", p, ids.size(), room);
    ids.erase(ids.begin(), ids.end() - room);
  }
}

int sample_autoregressive_run(const SampleOptions& o, TrainedModel& trained) {
  const SampleConfig& defaults = trained.config.sample;
  const Tokenizer& tokenizer = *trained.tokenizer;
  if (!o.infill.empty()) throw InputError("--infill needs a diffusion checkpoint; this one is autoregressive");
  if (o.posterior) throw InputError("--posterior is a diffusion option; this checkpoint is autoregressive");
  if (o.confidence_threshold)
    throw InputError("--confidence-threshold is a diffusion option; this checkpoint is autoregressive");
  if (o.approximate_cache)
    throw InputError("--approximate-cache is a diffusion option; this checkpoint is autoregressive");
  if (o.noisy_suffix) throw InputError("--noisy-suffix is a diffusion option; this checkpoint is autoregressive");

  const PromptFormat format(trained.config.chat, tokenizer);
  ArSampleOptions options = ar_sample_options(with_overrides(o, defaults), format);
  if (o.eager) options.decode = DecodeMode::growing_cache;

  const std::vector<std::string> prompts = read_prompts(o, defaults);
  std::vector<std::vector<int32_t>> prompt_ids;
  for (const auto& text : prompts) prompt_ids.push_back(format.encode(text));
  if (o.truncate_prompts) truncate_to_context(prompt_ids, options.max_new_tokens, trained.config.model.max_seq_len);

  ArSampleResult result = sample_autoregressive(trained.model, prompt_ids, options);
  for (size_t i = 0; i < result.samples.size(); ++i) {
    const ArSample& s = result.samples[i];
    print_sample(o, i, prompts[s.prompt_index], tokenizer.decode(s.tokens, o.keep_special), s.tokens,
                 {{"finish", to_string(s.finish)},
                  {"prompt_index", s.prompt_index},
                  {"log_prob", std::accumulate(s.log_probs.begin(), s.log_probs.end(), 0.0)},
                  {"unigram_entropy", unigram_entropy(s.tokens)}});
  }
  fmt::print(stderr, "{} tokens in {:.2f} s ({:.0f} tokens/s{}), checkpoint step {}\n", result.generated_tokens,
             result.seconds, result.tokens_per_s, result.cuda_graph ? ", CUDA graph" : "", trained.step);
  return 0;
}

// How the blocks read their context, for the summary line.
std::string context_words(const BlockSampleOptions& options) {
  if (options.use_cache) return ", KV cache";
  std::string words = options.noisy_suffix ? ", noisy suffix" : "";
  if (options.approximate_cache) words += options.noisy_suffix ? ", dual cache" : ", approximate prefix cache";
  return words;
}

// Semi-autoregressive: each prompt's copies are generated block by block (sampler/block_sampler.h).
int sample_blocks_run(const SampleOptions& o, TrainedModel& trained, const DiffusionProcess& process,
                      const BlockSampleOptions& options, int64_t copies) {
  const Tokenizer& tokenizer = *trained.tokenizer;
  const std::vector<std::string> prompts = read_prompts(o, trained.config.sample);
  int64_t blocks = 0, calls = 0;
  double seconds = 0;
  std::optional<ProgressBar> progress;
  if (prompts.size() > 1) progress.emplace("sample", static_cast<int64_t>(prompts.size()), ProgressBar::Unit::items, stderr);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto done = sample_in_blocks(trained.model, process, tokenizer.encode(prompts[p]), copies, options,
                                       trained.device);
    blocks += done.blocks;
    calls += done.model_calls;
    seconds += done.seconds;
    for (int64_t r = 0; r < copies; ++r) {
      const auto generated = generated_until_end(done.tokens[r], done.fixed[r], process.end_id);
      print_sample(o, p * static_cast<size_t>(copies) + static_cast<size_t>(r), prompts[p],
                   tokenizer.decode(generated, o.keep_special), generated,
                   {{"prompt_index", p}, {"unigram_entropy", unigram_entropy(generated)}, {"blocks", done.blocks}});
    }
    if (progress) progress->update(static_cast<int64_t>(p + 1), "prompts");
  }
  if (progress) progress->finish(static_cast<int64_t>(prompts.size()), "prompts");
  fmt::print(stderr, "{} prompts x {} samples, {} blocks of {} ({} steps each{}), {} model calls in {:.2f} s, "
                     "checkpoint step {}\n",
             prompts.size(), copies, blocks, options.block_size, options.per_block.steps,
             context_words(options), calls, seconds, trained.step);
  return 0;
}

// One denoised row: a prefix prompt is printed by print_sample and its text ends at the first end of text; an
// infill shows the whole filled template.
void print_diffusion_sample(const SampleOptions& o, int64_t index, const torch::Tensor& tokens,
                            const torch::Tensor& fixed, const std::string& prompt, int64_t copies, int64_t steps,
                            const DiffusionProcess& process, const Tokenizer& tokenizer) {
  const bool infill = !o.infill.empty();
  const std::vector<int32_t> generated = generated_until_end(tokens, fixed, process.end_id);
  const auto all = tokens.to(torch::kInt).contiguous();
  const std::vector<int32_t> every(all.data_ptr<int32_t>(), all.data_ptr<int32_t>() + all.numel());
  const std::vector<int32_t>& shown = infill ? every : generated;
  print_sample(o, static_cast<size_t>(index), infill ? "" : prompt, tokenizer.decode(shown, o.keep_special), shown,
               {{"prompt_index", index / copies}, {"unigram_entropy", unigram_entropy(generated)}, {"steps", steps}});
}

int sample_diffusion_run(const SampleOptions& o, TrainedModel& trained) {
  if (o.cache_dtype) throw InputError("--cache-dtype is an autoregressive option; this checkpoint is a diffusion model");
  const SampleConfig& defaults = trained.config.sample;
  const Tokenizer& tokenizer = *trained.tokenizer;
  const DiffusionProcess process = diffusion_process_for(*trained.objective, trained.config, tokenizer, trained.model->vocab_size());

  DiffusionSampleOptions options = diffusion_sample_options(with_overrides(o, defaults));
  if (o.eager) options.fused = false;
  const int64_t copies = o.num.value_or(defaults.num);
  const int64_t batch_size = o.batch_size.value_or(defaults.batch_size);

  const SampleConfig settings = with_overrides(o, defaults);
  if (const int64_t block = generation_block_size(settings, trained.config.diffusion); block > 0) {
    if (!o.infill.empty()) throw InputError("--infill fills one window; it does not combine with generating in blocks");
    BlockSampleOptions block_options = block_sample_options(settings, block, process);
    block_options.per_block = options;
    if (o.no_cache) block_options.use_cache = false;
    return sample_blocks_run(o, trained, process, block_options, copies);
  }
  if (settings.approximate_cache)
    throw InputError("the approximate prefix cache (--approximate-cache, sample.approximate_cache) is for generating "
                     "in blocks; give --block-size");
  if (settings.noisy_suffix)
    throw InputError("a noisy suffix (--noisy-suffix, sample.noisy_suffix) is for generating in blocks; give "
                     "--block-size");
  // Prompts are prefixes (an empty one samples unconditionally); an infill template fixes text around holes.
  std::vector<std::string> prompts;
  std::vector<CanvasRow> layouts;
  if (!o.infill.empty()) {
    prompts = {o.infill};
    layouts = {infill_row(o.infill, tokenizer)};
  } else {
    prompts = read_prompts(o, defaults);
    for (const auto& text : prompts)
      layouts.push_back(prefix_row(tokenizer.encode(text), o.max_new_tokens.value_or(defaults.max_new_tokens)));
  }
  const DiffusionCanvas canvas = make_canvas(layouts, copies);
  // The adaptive sampler adds its end anchor after the window.
  const int64_t positions = canvas.tokens.size(1) + (options.method == DiffusionMethod::adaptive ? 1 : 0);
  if (positions > trained.config.model.max_seq_len)
    throw InputError(fmt::format("{} positions to sample exceed model.max_seq_len = {}; lower --max-new-tokens",
                                 positions, trained.config.model.max_seq_len));

  auto row_text = [&](const torch::Tensor& row) {
    std::vector<int32_t> ids(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
    return tokenizer.decode(ids, o.keep_special);
  };
  // Sequences run in batches of batch_size rows; each keeps its own random stream (options.first_sequence), so
  // its sample does not depend on the batch it falls in (with the fused step), and memory is that of one batch.
  // Each batch is printed as it finishes, so a long run shows its samples (and a killed one keeps them), with a
  // progress line and its estimate on stderr.
  const int64_t rows = canvas.tokens.size(0);
  std::optional<ProgressBar> progress;
  if (rows > batch_size) progress.emplace("sample", rows, ProgressBar::Unit::items, stderr);
  int64_t model_calls = 0;
  double seconds = 0;
  for (int64_t first = 0; first < rows; first += batch_size) {
    const int64_t count = std::min(batch_size, rows - first);
    options.first_sequence = first;
    if (o.trace > 0) {
      options.trace_every = o.trace;
      options.on_trace = [&, first](int64_t step, const torch::Tensor& z) {
        const auto batch = z.cpu();
        for (int64_t r = 0; r < batch.size(0); ++r)
          fmt::print(stderr, "[step {:>4} sample {}] {}\n", step, first + r + 1, row_text(batch[r].contiguous()));
      };
    }
    const DiffusionCanvas part{canvas.tokens.narrow(0, first, count), canvas.fixed.narrow(0, first, count)};
    const auto done = sample_diffusion(model_denoiser(trained.model, process), process, part, options, trained.device);
    model_calls += done.model_calls;
    seconds += done.seconds;
    for (int64_t i = 0; i < count; ++i) print_diffusion_sample(o, first + i, done.tokens[i], part.fixed[i],
                                                              prompts[static_cast<size_t>((first + i) / copies)],
                                                              copies, options.steps, process, tokenizer);
    if (progress) progress->update(first + count, fmt::format("{:.2f} sequences/s", (first + count) / progress->elapsed_s()));
  }
  if (progress) progress->finish(rows);
  fmt::print(stderr, "{} sequences x {} positions, {} steps, {} model calls in {:.2f} s ({:.2f} sequences/s), "
                     "checkpoint step {}\n",
             rows, canvas.tokens.size(1), options.steps, model_calls, seconds, rows / std::max(seconds, 1e-9),
             trained.step);
  return 0;
}

int sample(const SampleOptions& o) {
  TrainedModel trained = load_trained_model(o.checkpoint, o.device);
  // The weights sample in the run's run.param_dtype unless told otherwise: bf16 halves what a GPU decode step reads.
  const FloatFormat weights =
      o.param_dtype ? choice_named<FloatFormat>(*o.param_dtype).value() : trained.config.run.param_dtype;
  if (weights == FloatFormat::bf16) {
    cast_parameters(*trained.model, torch::kBFloat16);
    fmt::print(stderr, "sampling with bf16 weights\n");
  }
  if (trained.objective->needs().mask == MaskMode::causal) return sample_autoregressive_run(o, trained);
  return sample_diffusion_run(o, trained);
}

}  // namespace

void add_sample_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<SampleOptions>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  auto* checkpoint = cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder");
  auto* run_dir = cmd->add_option("--run-dir", o->checkpoint, "Run folder (its newest checkpoint)");
  checkpoint->excludes(run_dir);
  auto* prompt = cmd->add_option("--prompt", o->prompt, "Prompt text");
  cmd->add_option("--prompts-file", o->prompts_file, "One prompt per line")->excludes(prompt);
  cmd->add_option("--num", o->num, "Samples per prompt")->check(count_range(1, 1000000));
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")->check(count_range(1, 1 << 24));
  cmd->add_option("--temperature", o->temperature, "Softmax temperature; 0: greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens; 0: all")->check(count_range(0, int64_t{1} << 31));
  cmd->add_option("--top-p", o->top_p, "Nucleus mass")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o->seed, "Sampling seed")->check(count_range(0, INT64_MAX));
  cmd->add_option("--infill", o->infill, "Diffusion: a template whose {{N}} placeholders are generated")
      ->excludes(prompt);
  cmd->add_option("--steps", o->steps, "Diffusion: denoising steps")->check(count_range(1, 1000000));
  cmd->add_option("--sampler", o->diffusion_sampler,
                  "Diffusion: " + fmt::format("{}", fmt::join(diffusion_method_names(), " | ")))
      ->check(CLI::IsMember(diffusion_method_names()));
  cmd->add_option("--noise-removal", o->noise_removal,
                  "Diffusion final step: " + fmt::format("{}", fmt::join(noise_removal_names(), " | ")))
      ->check(CLI::IsMember(noise_removal_names()));
  cmd->add_option("--block-size", o->block_size,
                  "Diffusion: generate in blocks of this many positions (semi-autoregressive); 0: the whole window")
      ->check(count_range(0, 1 << 20));
  cmd->add_flag("--no-cache", o->no_cache, "Diffusion in blocks: recompute the committed blocks at every step");
  cmd->add_flag("--approximate-cache", o->approximate_cache,
                "Diffusion in blocks, models trained on whole windows: the context's keys and values once per block");
  cmd->add_flag("--noisy-suffix", o->noisy_suffix,
                "Diffusion in blocks, models trained on whole windows: the blocks still to come are read as noise "
                "(with --approximate-cache: the dual cache)");
  cmd->add_option("--trace", o->trace, "Diffusion: print every sequence every K steps (stderr)")
      ->check(count_range(0, 1000000));
  cmd->add_option("--min-p", o->min_p,
                  "Keep tokens at least min-p times as likely as the most likely one (diffusion: on x̂)")
      ->check(CLI::Range(0.0, 0.999));
  cmd->add_option("--confidence-threshold", o->confidence_threshold,
                  "Diffusion confidence/adaptive samplers: also commit every position scoring at least this per step "
                  "(parallel decoding); 0: off")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--posterior", o->posterior, "Diffusion: float64 | float32, the precision of x̂ and the posterior")
      ->check(choice_member<PosteriorPrecision>());
  cmd->add_option("--cache-dtype", o->cache_dtype, "AR: the KV cache as the layers compute it (weights) or bf16")
      ->check(choice_member<CacheFormat>());
  cmd->add_option("--batch-size", o->batch_size,
                  "Sequences decoded at once (AR: rows refilled as they finish; diffusion: per denoiser call)")
      ->check(count_range(1, 1 << 20));
  cmd->add_flag("--eager", o->eager,
                "The eager reference paths: diffusion's float64 step instead of the fused one, AR decoding "
                "without CUDA graphs");
  cmd->add_flag("--truncate-prompts", o->truncate_prompts,
                "Autoregressive: keep the last tokens of a prompt too long for max_seq_len with the new tokens "
                "(default: refuse)");
  cmd->add_option("--format", o->format, "text | jsonl")->check(CLI::IsMember({"text", "jsonl"}));
  cmd->add_option("--device", o->device, "auto | cpu | cuda (default: the run's)");
  cmd->add_option("--param-dtype", o->param_dtype,
                  "fp32 | bf16: the weights' dtype while sampling (default: the run's)")
      ->check(choice_member<FloatFormat>());
  cmd->add_flag("--keep-special", o->keep_special, "Print special tokens (<|im_end|>, eos) instead of dropping them");
  cmd->callback([o, &action] {
    action = [o] {
      if (o->checkpoint.empty()) throw InputError("sample needs --checkpoint PATH or --run-dir DIR");
      return sample(*o);
    };
  });
}

}  // namespace inkstone::cli
