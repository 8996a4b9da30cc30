// The inkstone side of bench/run: one measurement per process (so peak RSS is the measurement's own), printed
// as one JSON line. Each mode drives the library the way `inkstone train` and `inkstone sample` do (run setup,
// training session, samplers, rollout engine) and writes the weights and inputs it used to share.safetensors in the
// work folder, so the Python peer (bench/peers/) starts from the same weights and data and can check its loss.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bench/kernel_times.h"
#include "checkpoint/module_weights.h"
#include "checkpoint/safetensors.h"
#include "core/errors.h"
#include "core/platform.h"
#include "dataset/byte_tokenizer.h"
#include "dataset/data_prepare.h"
#include "dataset/prompt_format.h"
#include "models/model_dims.h"
#include "objectives/diffusion_objective.h"
#include "sampler/ar_sampler.h"
#include "sampler/block_sampler.h"
#include "sampler/diffusion_posterior.h"
#include "sampler/diffusion_sampler.h"
#include "sampler/kernels/diffusion_step.h"
#include "sampler/rollout.h"
#include "tools/run_setup.h"
#include "train/session.h"
#include "train/window_source.h"

namespace fs = std::filesystem;
using namespace inkstone;

namespace {

struct BenchArgs {
  std::string mode;
  fs::path work = "bench-work";
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string param_dtype = "fp32";  // bf16: train with fp32 masters (run.param_dtype), or sample in bf16
  int64_t threads = 1;
  int64_t seed = 1234;
  int64_t d_model = 64, layers = 2, heads = 4, kv_heads = 4, seq_len = 64, batch = 8;
  std::string objective = "ar";
  int64_t steps = 10, warmup = 3;        // train: timed optimizer steps after warmup ones
  int64_t denoise_steps = 64;            // diffusion-sample
  int64_t new_tokens = 512;              // decode, rollout
  bool kv_cache = true;                  // decode
  bool fused = true;                     // diffusion-sample: the fused step, or the eager float64 one
  std::string posterior = "float64";     // diffusion-sample, diffusion-step: x̂, posterior and race in this dtype
  std::string decode = "auto";           // decode, rollout: auto | growing | fixed | graph (DecodeMode)
  int64_t vocab = 0;                     // model.vocab_size (0: the byte tokenizer's); rows past it are padding
  std::string profile;                   // a Chrome trace of every libtorch op of the run, when set
  std::string kernel_times;              // train on CUDA: Kineto trace of the timed steps here, top kernels in the JSON
  int64_t group = 8, prompts = 4;        // rollout
  std::string batching = "continuous";   // rollout: continuous | static (one batch until its last row ends)
  int64_t end_every = 0;                 // rollout: every end_every-th id ends a row too (varied lengths); 0: off
  int64_t prompt_tokens = 0;             // rollout: the longest prompt, the others down to a quarter; 0: the question
  int64_t block_size = 32;               // diffusion-blocks: positions per block; 0: the whole window at once
  std::string context = "exact";         // diffusion-blocks: exact | approximate | noisy-suffix | dual
  double threshold = 0;                  // diffusion-blocks: the confidence threshold (0: the step schedule alone)
};

DecodeMode decode_mode(const BenchArgs& a) {
  if (a.decode == "growing") return DecodeMode::growing_cache;
  if (a.decode == "fixed") return DecodeMode::fixed_window;
  if (a.decode == "graph") return DecodeMode::cuda_graph;
  return DecodeMode::automatic;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Pseudo-random words, one document per file: the token values do not change the cost of a step, only its
// shape does; a fixed generator keeps the corpus (and so every batch) the same across runs.
fs::path prepare_synthetic_corpus(const fs::path& work) {
  const fs::path data = work / "data";
  if (fs::exists(data / "manifest.json")) return data;
  const fs::path text = work / "text";
  fs::create_directories(text);
  const char* words[] = {"the", "river", "stone", "ink", "brush", "falls", "quiet", "under", "moon", "and",
                         "paper", "wind", "carries", "a", "long", "line", "of", "black", "water", "slowly"};
  uint64_t state = 42;
  for (int doc = 0; doc < 64; ++doc) {
    std::ofstream out(text / fmt::format("doc{:03}.txt", doc));
    for (int w = 0; w < 1500; ++w) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      out << words[(state >> 33) % 20] << ((w % 11 == 10) ? ".\n" : " ");
    }
  }
  PrepareOptions options;
  options.inputs = {text};
  options.out_dir = data;
  prepare_data(options, ByteTokenizer());
  return data;
}

Config bench_config(const BenchArgs& a, const std::string& objective, int64_t max_seq_len) {
  const std::vector<std::string> overrides = {
      fmt::format("run.seed={}", a.seed),
      fmt::format("run.threads={}", a.threads),
      fmt::format("run.device=\"{}\"", a.device),
      fmt::format("run.precision=\"{}\"", a.precision),
      fmt::format("run.param_dtype=\"{}\"", a.param_dtype),
      fmt::format("model.d_model={}", a.d_model),
      fmt::format("model.n_layers={}", a.layers),
      fmt::format("model.n_heads={}", a.heads),
      fmt::format("model.n_kv_heads={}", a.kv_heads),
      fmt::format("model.max_seq_len={}", std::max(max_seq_len, a.seq_len)),
      fmt::format("objective.name=\"{}\"", objective),
      fmt::format("data.path=\"{}\"", prepare_synthetic_corpus(a.work).string()),
      fmt::format("data.seq_len={}", a.seq_len),
      "schedule.kind=\"constant\"",
      "schedule.warmup_steps=0",
      fmt::format("train.steps={}", a.warmup + a.steps),
      fmt::format("train.batch_size={}", a.batch),
      fmt::format("train.log_interval={}", a.warmup + a.steps),
      "train.eval_interval=0",
      "train.eval_batches=1",
      "train.checkpoint_interval=0",
  };
  auto with_vocab = overrides;
  if (a.vocab > 0) with_vocab.push_back(fmt::format("model.vocab_size={}", a.vocab));
  return config_from_string("", "inkstone_bench", with_vocab);
}

void add_weights(NamedTensors& share, const LanguageModelImpl& model) {
  for (auto& [name, tensor] : module_weights(model)) share.emplace_back("model." + name, tensor);
}

std::map<std::string, std::string> shape_metadata(const BenchArgs& a, const LanguageModelImpl& model) {
  return {{"vocab_size", std::to_string(model.vocab_size())}, {"d_model", std::to_string(a.d_model)},
          {"n_layers", std::to_string(a.layers)}, {"n_heads", std::to_string(a.heads)},
          {"n_kv_heads", std::to_string(a.kv_heads)},
          {"head_dim", std::to_string(resolved_head_dim(model.config()))},
          {"ffn_dim", std::to_string(resolved_ffn_dim(model.config()))},
          {"norm_eps", fmt::format("{}", model.config().norm_eps)},
          {"rope_theta", fmt::format("{}", model.config().rope_theta)}};
}

// The loss both sides must agree on before anything is timed: the objective on the first training batch. For
// diffusion the noise (t, z_t) is drawn here and shared, so the peer scores exactly the same corruption.
double reference_loss(Objective& objective, LanguageModelImpl& model, const Batch& batch, NamedTensors& share) {
  torch::NoGradGuard no_grad;
  if (auto* diffusion = dynamic_cast<DiffusionObjective*>(&objective)) {
    const auto& x = batch.tokens;
    const auto t = 0.05 + 0.9 * torch::rand({x.size(0), 1}, x.options().dtype(torch::kFloat));
    const auto z = torch::where(batch.real, diffusion->corrupt(x, t, nullptr), x);
    const auto scores = diffusion->score(model, batch, t, z);
    share.emplace_back("support", diffusion->support().member_mask(torch::kCPU));
    share.emplace_back("check.t", t);
    share.emplace_back("check.z", z);
    return (scores.weighted.sum() / scores.scored.sum()).item<double>();
  }
  const LossOutput out = objective.loss(model, batch);
  return (out.loss_sum / out.count).item<double>();
}

nlohmann::json run_train(const BenchArgs& a) {
  const Config config = bench_config(a, a.objective, a.seq_len);
  auto ctx = cli::prepare_run(config);
  auto model = cli::build_model_for(config, *ctx.tokenizer, ctx.device);
  auto objective = make_objective(config, *ctx.tokenizer);
  const auto data = cli::open_training_data(config, *ctx.tokenizer, objective->needs());
  model->to(ctx.device);

  // Every batch the trainer will draw (a pure function of seed and step), for the peer to train on.
  const int64_t total_steps = a.warmup + a.steps;
  std::vector<torch::Tensor> batches;
  for (int64_t step = 0; step < total_steps; ++step) {
    const TokenBatch b = data.train->train_batch(step, a.batch);
    if (b.real_tokens() != b.rows * b.cols) throw std::runtime_error("bench batches must be fully packed");
    batches.push_back(token_batch_to_device(b, 0, b.rows, torch::kCPU).tokens);
  }
  NamedTensors share;
  add_weights(share, *model);
  share.emplace_back("batches", torch::stack(batches));
  const Batch first = token_batch_to_device(data.train->train_batch(0, a.batch), 0, a.batch, ctx.device);
  const double check_loss = reference_loss(*objective, *model, first, share);
  auto metadata = shape_metadata(a, *model);
  metadata["check_loss"] = fmt::format("{:.17g}", check_loss);
  write_safetensors(a.work / "share.safetensors", share, metadata);

  const fs::path run_dir = a.work / "run";
  fs::remove_all(run_dir);
  TrainingSession session(config, model, std::move(objective), ctx.tokenizer, run_dir, ctx.device);
  WindowSource source(session, data.train, data.sources);
  std::vector<std::chrono::steady_clock::time_point> done_at;
  std::vector<double> losses;
  source.on_step = [&](int64_t, double loss) {
    done_at.push_back(std::chrono::steady_clock::now());
    losses.push_back(loss);
    if (!a.kernel_times.empty() && static_cast<int64_t>(done_at.size()) == a.warmup) bench::start_kernel_times();
  };
  session.run(source);
  nlohmann::json kernels;
  if (!a.kernel_times.empty()) kernels = bench::stop_kernel_times(a.kernel_times, 30);
  if (static_cast<int64_t>(done_at.size()) != total_steps) throw std::runtime_error("a training step was skipped");
  // From the end of the last warmup step (or the start, without warmup) to the end of the last step.
  const double seconds = std::chrono::duration<double>(done_at.back() - done_at[a.warmup - 1]).count();
  return {{"tokens_per_s", static_cast<double>(a.steps * a.batch * a.seq_len) / seconds},
          {"seconds", seconds},
          {"check_loss", check_loss},
          {"losses", losses},
          {"params", model->param_counts().total},
          {"kernel_times", kernels}};
}

struct SamplingSetup {
  Config config;
  cli::RunContext ctx;
  LanguageModel model{nullptr};
};

SamplingSetup sampling_setup(const BenchArgs& a, const std::string& objective, int64_t max_seq_len) {
  SamplingSetup s{bench_config(a, objective, max_seq_len), {}, nullptr};
  s.ctx = cli::prepare_run(s.config);
  s.model = cli::build_model_for(s.config, *s.ctx.tokenizer, s.ctx.device);
  s.model->to(s.ctx.device);
  s.model->eval();
  if (s.config.run.param_dtype == FloatFormat::bf16) cast_parameters(*s.model, torch::kBFloat16);  // as `sample --param-dtype`
  return s;
}

// The forward process the setup's objective trains with, which the diffusion samplers invert.
DiffusionProcess diffusion_process_of(const SamplingSetup& s) {
  return diffusion_process_for(*make_objective(s.config, *s.ctx.tokenizer), s.config, *s.ctx.tokenizer,
                               s.model->vocab_size());
}

void share_model(const BenchArgs& a, const LanguageModelImpl& model, NamedTensors share = {}) {
  add_weights(share, model);
  write_safetensors(a.work / "share.safetensors", share, shape_metadata(a, model));
}

nlohmann::json run_diffusion_sample(const BenchArgs& a) {
  auto s = sampling_setup(a, "uniform_diffusion", a.seq_len);
  const auto process = diffusion_process_of(s);
  share_model(a, *s.model, {{"support", process.support->member_mask(torch::kCPU)}});
  const DiffusionCanvas canvas{torch::zeros({a.batch, a.seq_len}, torch::kLong),
                               torch::zeros({a.batch, a.seq_len}, torch::kBool)};
  DiffusionSampleOptions options;
  options.seed = a.seed;
  options.fused = a.fused;
  options.posterior_dtype = a.posterior == "float32" ? torch::kFloat : torch::kDouble;
  options.steps = 2;  // warmup: first calls allocate and pick kernels
  sample_diffusion(model_denoiser(s.model, process), process, canvas, options, s.ctx.device);
  options.steps = a.denoise_steps;
  const auto start = std::chrono::steady_clock::now();
  const auto result = sample_diffusion(model_denoiser(s.model, process), process, canvas, options, s.ctx.device);
  const double seconds = seconds_since(start);
  return {{"sequences_per_s", a.batch / seconds},
          {"seconds", seconds},
          {"model_calls", result.model_calls}};
}

// Confidence decoding of `seq_len` positions after a one-token prompt, `denoise_steps` steps in all: in blocks of
// block_size (each its share of the steps) with the context read as `context` says (sampler/block_sampler.h), or
// the whole window at once (block_size 0), the decoding the block caches are measured against.
nlohmann::json run_diffusion_blocks(const BenchArgs& a) {
  auto s = sampling_setup(a, "uniform_diffusion", a.seq_len + 1);
  auto process = diffusion_process_of(s);
  process.end_id = -1;  // every side decodes every position (blocks would stop once each row drew an end of text)
  const std::vector<int32_t> prompt = {s.ctx.tokenizer->specials().eos};
  DiffusionSampleOptions options;
  options.seed = a.seed;
  options.method = DiffusionMethod::confidence;
  options.confidence_threshold = a.threshold;
  BlockSampleOptions blocks;
  blocks.block_size = a.block_size;
  blocks.max_new_tokens = a.seq_len;
  blocks.use_cache = false;
  set_block_context(a.context, blocks);
  const int64_t count = a.block_size > 0 ? (a.seq_len + a.block_size - 1) / a.block_size : 1;
  auto decode = [&](int64_t steps) {
    options.steps = std::max<int64_t>(1, steps / count);
    if (a.block_size > 0) {
      blocks.per_block = options;
      return sample_in_blocks(s.model, process, prompt, a.batch, blocks, s.ctx.device).model_calls;
    }
    auto fixed = torch::zeros({a.batch, 1 + a.seq_len}, torch::kBool);
    fixed.narrow(1, 0, 1).fill_(true);
    const DiffusionCanvas canvas{torch::full({a.batch, 1 + a.seq_len}, prompt.front(), torch::kLong), fixed};
    return sample_diffusion(model_denoiser(s.model, process), process, canvas, options, s.ctx.device).model_calls;
  };
  decode(count);  // warmup: first calls allocate and pick kernels
  const auto start = std::chrono::steady_clock::now();
  const int64_t calls = decode(a.denoise_steps);
  const double seconds = seconds_since(start);
  return {{"sequences_per_s", a.batch / seconds}, {"seconds", seconds}, {"model_calls", calls}};
}

// One reverse step alone, no model: from logits [batch, seq_len, V] to the next tokens, fused (the kernel, or its
// CPU twin) or eager (float64 x̂, posterior and exponential race, as the sampler's reference path). Random logits
// in the run's precision; --denoise-steps timed repetitions after one untimed.
nlohmann::json run_diffusion_step(const BenchArgs& a) {
  auto s = sampling_setup(a, "uniform_diffusion", a.seq_len);
  const auto process = diffusion_process_of(s);
  const auto device = s.ctx.device;
  const int64_t vocab = s.model->vocab_size();
  const auto support = process.support->member_mask(device);
  torch::manual_seed(a.seed);
  const auto dtype = a.precision == "bf16" ? torch::kBFloat16 : torch::kFloat;
  const auto logits = (3 * torch::randn({a.batch, a.seq_len, vocab}, torch::device(device))).to(dtype);
  const auto support_ids = support.nonzero().squeeze(1);
  const auto z = support_ids.index_select(
      0, torch::randint(support_ids.size(0), {a.batch * a.seq_len}, support_ids.options())).view({a.batch, a.seq_len});
  const auto sequences = torch::arange(a.batch, torch::dtype(torch::kLong).device(device));
  auto generator = at::globalContext().defaultGenerator(device).clone();
  const NoiseLevelsAt at_t{0.3, 0.0, 0.7}, at_s{0.4, 0.0, 0.6};  // uniform noise
  auto step = [&](uint32_t k) {
    if (a.fused) {
      kernels::DiffusionRowParams p;
      p.alpha_t = at_t.keep;
      p.alpha_s = at_s.keep;
      p.uniform_t = at_t.uniform;
      p.uniform_s = at_s.uniform;
      p.support_size = process.support->size();
      p.seed = static_cast<uint64_t>(a.seed);
      p.step = k;
      p.float32 = a.posterior == "float32";
      return fused_diffusion_step(logits, z, support, sequences, p);
    }
    const auto x_hat = torch::softmax(process.support->restrict_logits(logits.to(torch::kDouble)), -1);
    return exponential_race(interpolating_posterior(x_hat, z, at_t, at_s, support, -1), generator);
  };
  step(0).sum().item<int64_t>();  // warmup; the host read waits for the device
  const auto start = std::chrono::steady_clock::now();
  int64_t checksum = 0;
  for (int64_t k = 1; k <= a.denoise_steps; ++k) checksum += step(static_cast<uint32_t>(k)).sum().item<int64_t>();
  const double seconds = seconds_since(start);
  return {{"steps_per_s", a.denoise_steps / seconds}, {"seconds", seconds}, {"vocab", vocab}, {"checksum", checksum}};
}

nlohmann::json run_decode(const BenchArgs& a) {
  auto s = sampling_setup(a, "ar", a.new_tokens + 1);
  share_model(a, *s.model);
  const std::vector<std::vector<int32_t>> prompts = {{s.ctx.tokenizer->specials().eos}};
  ArSampleOptions options;
  options.num_samples = a.batch;
  options.seed = a.seed;
  options.use_kv_cache = a.kv_cache;
  options.decode = decode_mode(a);
  options.max_new_tokens = 8;  // warmup
  sample_autoregressive(s.model, prompts, options);
  options.max_new_tokens = a.new_tokens;
  const auto start = std::chrono::steady_clock::now();
  const auto result = sample_autoregressive(s.model, prompts, options);
  const double seconds = seconds_since(start);
  return {{"tokens_per_s", result.generated_tokens / seconds},
          {"seconds", seconds},
          {"generated_tokens", result.generated_tokens},
          {"cuda_graph", result.cuda_graph}};
}

// Rollout prompts: a question each, and with prompt_tokens > 0 a passage before it that brings prompt p to about
// prompt_tokens · (1 + 3p / (P − 1)) / 4 tokens (of a byte tokenizer), the varied lengths of few-shot prompts.
std::vector<std::vector<int32_t>> rollout_prompts(const BenchArgs& a, const PromptFormat& format) {
  const std::string sentence = "Add the two numbers and give the sum. ";
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t p = 0; p < a.prompts; ++p) {
    const auto question = fmt::format("What is {} + {}?\n", 17 * p + 3, 29 * p + 8);
    const double share = a.prompts > 1 ? static_cast<double>(p) / static_cast<double>(a.prompts - 1) : 1.0;
    const auto length = static_cast<size_t>(static_cast<double>(a.prompt_tokens) * (1.0 + 3.0 * share) / 4.0);
    std::string passage;
    while (passage.size() + question.size() < length) passage += sentence;
    passage.resize(length > question.size() ? length - question.size() : 0);
    prompts.push_back(format.encode(passage + question));
  }
  return prompts;
}

nlohmann::json run_rollout(const BenchArgs& a) {
  auto s = sampling_setup(a, "ar", std::max<int64_t>(64, a.prompt_tokens + 16) + a.new_tokens);
  const PromptFormat format(default_config().chat, *s.ctx.tokenizer);  // eos, then the raw text, as the peer
  const auto prompts = rollout_prompts(a, format);
  size_t longest = 64;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  auto padded = torch::full({a.prompts, static_cast<int64_t>(longest)}, -1, torch::kLong);
  for (int64_t p = 0; p < a.prompts; ++p)
    for (size_t i = 0; i < prompts[p].size(); ++i) padded[p][static_cast<int64_t>(i)] = prompts[p][i];
  share_model(a, *s.model, {{"prompts", padded}});

  RolloutOptions options;
  options.end_ids = format.end_ids();
  options.group_size = a.group;
  options.seed = a.seed;
  options.decode = decode_mode(a);
  options.continuous = a.batching == "continuous";
  // A random model draws eos about once in V steps; more end ids give the varied lengths a trained policy has.
  for (int64_t id = 0; a.end_every > 0 && id < s.ctx.tokenizer->vocab_size(); id += a.end_every)
    options.end_ids.push_back(static_cast<int32_t>(id));
  options.max_new_tokens = 8;  // warmup
  generate_rollouts(s.model, *s.ctx.tokenizer, prompts, options);
  options.max_new_tokens = a.new_tokens;
  const auto start = std::chrono::steady_clock::now();
  const auto result = generate_rollouts(s.model, *s.ctx.tokenizer, prompts, options);
  const double seconds = seconds_since(start);
  // Decode steps a static batch runs (until every row stopped) times its rows: the work it does, independent of
  // where random draws happened to hit an end; generated_tokens counts only tokens up to each row's end (the
  // useful ones).
  const int64_t steps = *std::max_element(result.lengths.begin(), result.lengths.end());
  const auto row_steps = static_cast<double>(steps * a.prompts * a.group);
  return {{"tokens_per_s", row_steps / seconds},
          {"generated_tokens_per_s", result.generated_tokens / seconds},
          {"prompts_per_s", static_cast<double>(a.prompts) / seconds},
          {"mean_length", static_cast<double>(result.generated_tokens) / static_cast<double>(a.prompts * a.group)},
          {"seconds", seconds},
          {"decode_steps", steps}};
}

}  // namespace

int main(int argc, char** argv) {
  inkstone::keep_freed_memory_for_reuse();
  BenchArgs a;
  CLI::App app{"inkstone_bench: one benchmark measurement as a JSON line (driven by bench/run)"};
  app.add_option("mode", a.mode, "train | diffusion-sample | diffusion-blocks | diffusion-step | decode | rollout")
      ->required()
      ->check(CLI::IsMember({"train", "diffusion-sample", "diffusion-blocks", "diffusion-step", "decode", "rollout"}));
  app.add_option("--work", a.work, "Scratch folder: synthetic corpus, run folder, share.safetensors");
  app.add_option("--device", a.device)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", a.precision)->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--param-dtype", a.param_dtype,
                 "the weights' dtype (train: bf16 with fp32 master weights; sampling: bf16 weights)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--threads", a.threads);
  app.add_option("--seed", a.seed);
  app.add_option("--d-model", a.d_model);
  app.add_option("--layers", a.layers);
  app.add_option("--heads", a.heads);
  app.add_option("--kv-heads", a.kv_heads);
  app.add_option("--seq-len", a.seq_len, "Training window, or diffusion canvas length");
  app.add_option("--batch", a.batch);
  app.add_option("--objective", a.objective)->check(CLI::IsMember({"ar", "uniform_diffusion"}));
  app.add_option("--steps", a.steps, "train: timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a.warmup, "train: untimed first steps")->check(CLI::PositiveNumber);
  app.add_option("--denoise-steps", a.denoise_steps)->check(CLI::PositiveNumber);
  app.add_option("--new-tokens", a.new_tokens)->check(CLI::PositiveNumber);
  app.add_option("--kv-cache", a.kv_cache, "decode: with the KV cache (1) or full recompute (0)");
  app.add_option("--vocab", a.vocab, "model.vocab_size: 0 is the byte tokenizer's; larger pads the head");
  app.add_option("--fused", a.fused, "diffusion-sample: the fused step (1) or the eager float64 step (0)");
  app.add_option("--posterior", a.posterior, "diffusion-sample, diffusion-step: float64 | float32")
      ->check(CLI::IsMember({"float64", "float32"}));
  app.add_option("--decode", a.decode, "decode, rollout: auto | growing | fixed | graph (CUDA graph replay)")
      ->check(CLI::IsMember({"auto", "growing", "fixed", "graph"}));
  app.add_option("--group", a.group)->check(CLI::PositiveNumber);
  app.add_option("--batching", a.batching, "rollout: continuous | static")
      ->check(CLI::IsMember({"continuous", "static"}));
  app.add_option("--end-every", a.end_every, "rollout: ids 0, n, 2n, ... end a row as eos does; 0: eos only")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompt-tokens", a.prompt_tokens,
                 "rollout: prompts of a quarter of this many tokens up to this many (a passage before the question)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prompts", a.prompts)->check(CLI::PositiveNumber);
  // The last --block-size and --context count: bench/run appends a comparison's own to the row's.
  app.add_option("--block-size", a.block_size, "diffusion-blocks: positions per block; 0: the whole window")
      ->check(CLI::NonNegativeNumber)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--context", a.context, "diffusion-blocks: exact | approximate | noisy-suffix | dual")
      ->check(CLI::IsMember(block_context_names()))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--threshold", a.threshold, "diffusion-blocks: confidence threshold; 0: off")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--profile", a.profile, "Write a Chrome trace of the libtorch ops run to this file");
  app.add_option("--kernel-times", a.kernel_times,
                 "train, CUDA (libtorch 2.x): Kineto trace of the timed steps to this file, top kernels in the JSON");
  CLI11_PARSE(app, argc, argv);
  if (!a.kernel_times.empty() && (a.mode != "train" || a.device != "cuda" || !bench::kernel_times_available())) {
    std::cerr << "error: --kernel-times needs train mode on a CUDA build of libtorch 2.x\n";
    return 2;
  }

  try {
    fs::create_directories(a.work);
    std::optional<torch::autograd::profiler::RecordProfile> profile;
    if (!a.profile.empty()) profile.emplace(a.profile);
    nlohmann::json result = a.mode == "train"              ? run_train(a)
                            : a.mode == "diffusion-sample" ? run_diffusion_sample(a)
                            : a.mode == "diffusion-blocks" ? run_diffusion_blocks(a)
                            : a.mode == "diffusion-step"   ? run_diffusion_step(a)
                            : a.mode == "decode"           ? run_decode(a)
                                                           : run_rollout(a);
    result["peak_rss_mb"] = peak_rss_mb();
    result["threads"] = at::get_num_threads();
    std::cout << result.dump() << std::endl;
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
