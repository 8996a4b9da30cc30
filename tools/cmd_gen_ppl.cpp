// `inkstone gen-ppl --run-dir DIFFUSION_RUN --judge AR_RUN [--samplers
// ancestral,greedy-tail,confidence,adaptive,semi-ar]
//  [--steps 8,16,32,64,128] [--num N] [--max-new-tokens T] [--prompt TEXT] [--seed S] [--temperature X]
//  [--top-p P] [--batch-size B] [--block-size S] [--device D] [--out FILE.json]`
// The comparison diffusion papers make (Duo, MDLM): for each sampler and step count, N samples of the diffusion
// run, their generative perplexity under a judge autoregressive model (an inkstone AR run or an imported Hugging
// Face model) and their mean unigram entropy; a Markdown table on stdout, JSON in --out (docs/diffusion.md,
// "Generative perplexity"). An autoregressive run in --run-dir gives the baseline row of its own samples.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "dataset/prompt_format.h"
#include "sampler/ar_sampler.h"
#include "sampler/block_sampler.h"
#include "sampler/diffusion_canvas.h"
#include "sampler/diffusion_sampler.h"
#include "sampler/generative_perplexity.h"
#include "sampler/text_samples.h"
#include "tools/commands.h"
#include "tools/run_setup.h"

namespace inkstone::cli {
namespace {

struct GenPplOptions {
  std::string checkpoint;
  std::string judge;
  std::vector<std::string> samplers = {"ancestral", "greedy-tail", "confidence", "adaptive"};
  std::vector<int64_t> steps = {8, 16, 32, 64, 128};
  std::vector<double> thresholds = {0.0};  // confidence samplers (sample.confidence_threshold)
  std::vector<std::string> caches = {"exact"};  // semi-ar samplers: block_context_names()
  int64_t num = 16;
  std::optional<int64_t> max_new_tokens, seed, batch_size, block_size;
  std::optional<double> temperature, top_p;
  std::string prompt;
  std::string device;
  std::string out;
};

// A sampler name of the grid as sampler options: greedy-tail is ancestral steps with an argmax last step (Duo);
// semi-ar is ancestral steps within each block, semi-ar-confidence confidence commits within each block (LLaDA's
// semi-autoregressive remasking).
void apply_sampler_name(const std::string& name, DiffusionSampleOptions& options) {
  options.noise_removal = NoiseRemoval::ancestral;
  if (name == "greedy-tail" || name == "semi-ar") {
    options.method = DiffusionMethod::ancestral;
    if (name == "greedy-tail") options.noise_removal = NoiseRemoval::greedy;
    return;
  }
  if (name == "semi-ar-confidence") {
    options.method = DiffusionMethod::confidence;
    return;
  }
  options.method = diffusion_method_from_name(name, "gen-ppl --samplers");
}

bool in_blocks(const std::string& name) { return name == "semi-ar" || name == "semi-ar-confidence"; }

// Samplers that commit positions by confidence, the ones a threshold applies to.
bool commits_by_confidence(const std::string& name) {
  return name == "confidence" || name == "adaptive" || name == "semi-ar-confidence";
}

struct GridRow {
  std::string sampler;
  int64_t steps = 0;
  double threshold = 0;
  std::string cache;
  JudgeScore judge;
  double entropy = 0;      // mean over samples, nats
  double mean_tokens = 0;  // generated tokens before the first end of text
  double seconds = 0;      // sampling only
  int64_t model_calls = 0;
  std::string example;     // the first sample's text
  std::vector<std::string> texts;

  // One of `num` samples: its generated ids (without the end of text) and their text.
  void add_sample(const std::vector<int32_t>& ids, std::string text, int64_t num) {
    entropy += unigram_entropy(ids) / static_cast<double>(num);
    mean_tokens += static_cast<double>(ids.size()) / static_cast<double>(num);
    texts.push_back(std::move(text));
  }
  // The judge's score of every sample added.
  void score_with(TrainedModel& judge) {
    this->judge = judge_texts(judge.model, *judge.tokenizer, texts, judge.device);
    example = texts.front();
  }
};

int report(const GenPplOptions& o, const TrainedModel& run, const TrainedModel& judge, const SampleConfig& sample,
           int64_t new_tokens, const std::vector<GridRow>& rows);

// An autoregressive run's samples scored the same way, the baseline of the table: one row, `autoregressive`.
GridRow autoregressive_row(const GenPplOptions& o, TrainedModel& run, TrainedModel& judge, const SampleConfig& sample,
                           int64_t new_tokens) {
  const PromptFormat format(run.config.chat, *run.tokenizer);
  SampleConfig settings = sample;
  settings.num = o.num;
  settings.max_new_tokens = new_tokens;
  const ArSampleResult done =
      sample_autoregressive(run.model, {format.encode(o.prompt)}, ar_sample_options(settings, format));
  GridRow row{"autoregressive", 0};
  row.seconds = done.seconds;
  for (const ArSample& s : done.samples) {
    std::vector<int32_t> ids = s.tokens;
    if (s.finish == FinishReason::eos && !ids.empty()) ids.pop_back();  // the end of text, as diffusion texts
    row.add_sample(ids, run.tokenizer->decode(ids, false), o.num);
  }
  row.score_with(judge);
  return row;
}

// What every point of a diffusion run's grid shares.
struct DiffusionGrid {
  const GenPplOptions& o;
  TrainedModel& run;
  const DiffusionProcess& process;
  const DiffusionCanvas& canvas;
  const SampleConfig& sample;
  int64_t new_tokens, block_size, batch_size;
};

// The `num` samples of one grid point (its sampler, steps, threshold and cache set in `row`), not yet scored.
GridRow sample_grid_point(const DiffusionGrid& g, GridRow row) {
  DiffusionSampleOptions options = diffusion_sample_options(g.sample);
  apply_sampler_name(row.sampler, options);
  options.steps = row.steps;
  options.confidence_threshold = row.threshold;
  auto collect = [&](const torch::Tensor& tokens, const torch::Tensor& fixed) {
    const auto ids = generated_until_end(tokens, fixed, g.process.end_id);
    row.add_sample(ids, g.run.tokenizer->decode(ids, false), g.o.num);
  };
  if (in_blocks(row.sampler)) {
    // `steps` counts steps over the whole text: each block gets its share.
    BlockSampleOptions blocks = block_sample_options(g.sample, g.block_size, g.process);
    blocks.max_new_tokens = g.new_tokens;
    set_block_context(row.cache, blocks);
    blocks.per_block = options;
    const int64_t count = (g.new_tokens + g.block_size - 1) / g.block_size;
    blocks.per_block.steps = std::max<int64_t>(1, (row.steps + count - 1) / count);
    const auto done =
        sample_in_blocks(g.run.model, g.process, g.run.tokenizer->encode(g.o.prompt), g.o.num, blocks, g.run.device);
    row.seconds = done.seconds;
    row.model_calls = done.model_calls;
    for (int64_t r = 0; r < g.o.num; ++r) collect(done.tokens[r], done.fixed[r]);
    return row;
  }
  for (int64_t first = 0; first < g.o.num; first += g.batch_size) {
    const int64_t count = std::min(g.batch_size, g.o.num - first);
    options.first_sequence = first;
    const DiffusionCanvas part{g.canvas.tokens.narrow(0, first, count), g.canvas.fixed.narrow(0, first, count)};
    const auto done = sample_diffusion(model_denoiser(g.run.model, g.process), g.process, part, options, g.run.device);
    row.seconds += done.seconds;
    row.model_calls += done.model_calls;
    for (int64_t r = 0; r < count; ++r) collect(done.tokens[r], part.fixed[r]);
  }
  return row;
}

int gen_ppl(const GenPplOptions& o) {
  TrainedModel run = load_trained_model(o.checkpoint, o.device);
  const bool autoregressive = run.objective->needs().mask == MaskMode::causal;
  TrainedModel judge = load_trained_model(o.judge, o.device);
  if (judge.objective->needs().mask != MaskMode::causal)
    throw InputError(fmt::format("--judge '{}' is not an autoregressive model", o.judge));

  SampleConfig sample = run.config.sample;
  sample.seed = o.seed.value_or(sample.seed);
  sample.temperature = o.temperature.value_or(sample.temperature);
  sample.top_p = o.top_p.value_or(sample.top_p);
  const int64_t new_tokens = o.max_new_tokens.value_or(sample.max_new_tokens);
  std::vector<GridRow> rows;
  if (autoregressive) {
    rows.push_back(autoregressive_row(o, run, judge, sample, new_tokens));
    return report(o, run, judge, sample, new_tokens, rows);
  }
  const int64_t batch_size = o.batch_size.value_or(sample.batch_size);
  const int64_t block_size = o.block_size.value_or(generation_block_size(sample, run.config.diffusion));
  if (block_size < 1 && std::any_of(o.samplers.begin(), o.samplers.end(), in_blocks))
    throw InputError(
        "the semi-ar samplers need --block-size (the run has no sample.block_size or "
        "diffusion.block_size)");
  const DiffusionProcess process =
      diffusion_process_for(*run.objective, run.config, *run.tokenizer, run.model->vocab_size());
  const DiffusionCanvas canvas = make_canvas({prefix_row(run.tokenizer->encode(o.prompt), new_tokens)}, o.num);
  if (canvas.tokens.size(1) + 1 > run.config.model.max_seq_len)
    throw InputError(
        fmt::format("{} positions (and the adaptive sampler's anchor) exceed model.max_seq_len = {}; "
                    "lower --max-new-tokens",
                    canvas.tokens.size(1), run.config.model.max_seq_len));

  const DiffusionGrid grid{o, run, process, canvas, sample, new_tokens, block_size, batch_size};
  for (const auto& name : o.samplers) {
    for (const int64_t steps : o.steps) {
      for (const double threshold : o.thresholds) {
        for (const auto& cache : o.caches) {
          if (threshold > 0 && !commits_by_confidence(name)) continue;
          if (cache != "exact" && !in_blocks(name)) continue;
          GridRow row = sample_grid_point(grid, {name, steps, threshold, cache});
          row.score_with(judge);
          fmt::print(stderr, "{} at {} steps, threshold {}, {} cache: Gen PPL {:.2f}, entropy {:.3f}, {:.1f} s\n",
                     name, steps, threshold, cache, row.judge.perplexity(), row.entropy, row.seconds);
          rows.push_back(row);
        }
      }
    }
  }

  return report(o, run, judge, sample, new_tokens, rows);
}

// The table on stdout and the JSON in --out.
int report(const GenPplOptions& o, const TrainedModel& run, const TrainedModel& judge, const SampleConfig& sample,
           int64_t new_tokens, const std::vector<GridRow>& rows) {
  fmt::print("Gen PPL of {} samples ({} new tokens{}) of {} (step {}) under the judge {} (step {})\n\n", o.num,
             new_tokens, o.prompt.empty() ? "" : ", prompt \"" + o.prompt + "\"", o.checkpoint, run.step, o.judge,
             judge.step);
  fmt::print(
      "| sampler | steps | threshold | cache | Gen PPL | entropy (nats) | tokens | model calls | tokens/s | seconds |\n"
      "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
  nlohmann::json grid = nlohmann::json::array();
  for (const auto& row : rows) {
    // Generated tokens (up to each sample's end) per second of sampling.
    const double tokens_per_s = row.mean_tokens * static_cast<double>(o.num) / std::max(row.seconds, 1e-9);
    const std::string steps = row.steps > 0 ? std::to_string(row.steps) : "-";
    const std::string threshold = row.threshold > 0 ? fmt::format("{}", row.threshold) : "-";
    fmt::print("| {} | {} | {} | {} | {:.2f} | {:.3f} | {:.1f} | {} | {:.1f} | {:.1f} |\n", row.sampler, steps,
               threshold, row.cache.empty() ? "-" : row.cache, row.judge.perplexity(), row.entropy, row.mean_tokens,
               row.model_calls, tokens_per_s, row.seconds);
    grid.push_back({{"sampler", row.sampler},
                    {"steps", row.steps},
                    {"threshold", row.threshold},
                    {"cache", row.cache},
                    {"model_calls", row.model_calls},
                    {"tokens_per_s", tokens_per_s},
                    {"gen_ppl", row.judge.perplexity()},
                    {"judge_nll_sum", row.judge.nll_sum},
                    {"judge_tokens", row.judge.tokens},
                    {"truncated", row.judge.truncated},
                    {"unigram_entropy", row.entropy},
                    {"mean_tokens", row.mean_tokens},
                    {"seconds", row.seconds},
                    {"example", row.example}});
  }
  if (!o.out.empty()) {
    const nlohmann::json report = {
        {"run", o.checkpoint},      {"run_step", run.step}, {"judge", o.judge},
        {"judge_step", judge.step}, {"samples", o.num},     {"max_new_tokens", new_tokens},
        {"prompt", o.prompt},       {"seed", sample.seed},  {"temperature", sample.temperature},
        {"top_p", sample.top_p},    {"grid", grid}};
    write_file_atomic(o.out, report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  return 0;
}

}  // namespace

void add_gen_ppl_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<GenPplOptions>();
  auto* cmd = app.add_subcommand(
      "gen-ppl",
      "Generative perplexity and entropy of a diffusion run's samples under a judge AR model, per sampler "
      "and step count");
  cmd->add_option("--run-dir", o->checkpoint,
                  "Run folder (its newest checkpoint) or checkpoint: diffusion, or autoregressive for a baseline row")
      ->required();
  cmd->add_option("--judge", o->judge, "Autoregressive run folder or checkpoint (an imported HF model too)")
      ->required();
  cmd->add_option("--samplers", o->samplers,
                  "ancestral, greedy-tail, confidence, adaptive, semi-ar, semi-ar-confidence (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"ancestral", "greedy-tail", "confidence", "adaptive", "semi-ar", "semi-ar-confidence"}));
  cmd->add_option("--block-size", o->block_size, "semi-ar: positions per block (default: the run's)")
      ->check(count_range(1, 1 << 20));
  cmd->add_option("--steps", o->steps, "Denoising step counts (comma-separated)")
      ->delimiter(',')
      ->check(count_range(1, 1000000));
  cmd->add_option("--thresholds", o->thresholds,
                  "Confidence thresholds for the confidence samplers (comma-separated; 0: the step schedule alone)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--caches", o->caches,
                  "semi-ar samplers: exact (the block-diffusion cache, or recomputing the context), approximate "
                  "(the prefix cache, once per block), noisy-suffix (exact, the blocks still to come read as noise), "
                  "dual (the noisy suffix and the context cached once per block) (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember(block_context_names()));
  cmd->add_option("--num", o->num, "Samples per grid point")->check(count_range(1, 1000000));
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Positions to generate")->check(count_range(1, 1 << 24));
  cmd->add_option("--prompt", o->prompt, "Prefix every sample continues (default: none)");
  cmd->add_option("--seed", o->seed, "Sampling seed")->check(count_range(0, INT64_MAX));
  cmd->add_option("--temperature", o->temperature, "On x̂; 0: argmax")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", o->top_p, "Nucleus mass on x̂")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--batch-size", o->batch_size, "Sequences per denoiser call")->check(count_range(1, 1 << 20));
  cmd->add_option("--device", o->device, "auto | cpu | cuda (default: the runs')");
  cmd->add_option("--out", o->out, "Also write the grid as JSON here");
  cmd->callback([o, &action] { action = [o] { return gen_ppl(*o); }; });
}

}  // namespace inkstone::cli
