#include "sampler/diffusion_sampler.h"

#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "objectives/transition_log_prob.h"
#include "sampler/diffusion_posterior.h"
#include "sampler/kernels/diffusion_step.h"

namespace inkstone {
namespace {

// x̂ in `dtype` over the support: temperature, top-k and top-p act here, on the network's output
// (docs/diffusion.md, "Filters on the model output"); temperature 0 makes x̂ the point mass on its argmax.
torch::Tensor clean_token_probs(const torch::Tensor& logits, const DiffusionProcess& process,
                                const SamplingParams& filter, torch::ScalarType dtype) {
  auto restricted = process.support->restrict_logits(logits.to(dtype));
  if (filter.temperature == 0) {
    return torch::zeros_like(restricted).scatter_(-1, restricted.argmax(-1, /*keepdim=*/true), 1.0);
  }
  auto scaled = restricted / filter.temperature;
  return top_p_filter(top_k_filter(scaled, filter.top_k), filter.top_p).softmax(-1);
}

// Per row, how many of its `free` positions step k of `steps` commits: floor((k+1)F/T) − floor(kF/T), so that
// all F are committed after the last step.
torch::Tensor commits_at_step(const torch::Tensor& free_count, int64_t k, int64_t steps) {
  return torch::floor_divide(free_count * (k + 1), steps) - torch::floor_divide(free_count * k, steps);
}

// Confidence-based step (docs/diffusion.md, "Confidence sampling"; gidd-easydel, LLaDA's low-confidence
// remasking): each row commits its `count` highest-scoring open positions to `drawn`, draws from x̂ (its argmax at
// temperature 0); committed positions join the fixed ones. A position scores how much x̂ prefers another token to
// the current one, max_v x̂_v − x̂_{z_i}: at a masked position x̂ has no mass on z, so the score is max_v x̂_v.
// threshold > 0 (docs/diffusion.md, "Threshold decoding"; Fast-dLLM's parallel decoding): every open position
// scoring at least the threshold is committed too.
void confidence_step(torch::Tensor& z, torch::Tensor& open, const torch::Tensor& x_hat, const torch::Tensor& count,
                     const torch::Tensor& drawn, double threshold) {
  const auto best = std::get<0>(x_hat.max(-1));
  const auto score = (best - x_hat.gather(-1, z.unsqueeze(-1)).squeeze(-1)).masked_fill(~open, -1.0);
  const auto order = score.argsort(-1, /*descending=*/true);
  const auto rank = torch::empty_like(order).scatter_(-1, order, torch::arange(z.size(1), order.options())
                                                                     .expand_as(order).contiguous());
  auto commit = open & rank.lt(count.unsqueeze(-1));
  if (threshold > 0) commit |= open & score.ge(threshold);
  z = torch::where(commit, drawn, z);
  open = open & ~commit;
}

}  // namespace

DiffusionProcess diffusion_process_for(const Objective& objective, const Config& config, const Tokenizer& tokenizer,
                                       int64_t model_vocab) {
  const auto* diffusion = dynamic_cast<const DiffusionObjective*>(&objective);
  if (!diffusion) throw InputError(fmt::format("objective '{}' has no diffusion sampler", objective.name()));
  DiffusionProcess process;
  process.noise = diffusion->noise();
  process.support = std::make_shared<NoiseSupport>(tokenizer, model_vocab, config.diffusion.noise_specials);
  process.mask_id = tokenizer.specials().mask;
  process.time_conditioned = config.model.time_conditioning;
  process.end_id = tokenizer.specials().eos;
  process.block_size = config.diffusion.block_size;
  process.shifted_outputs = config.diffusion.shifted_outputs;
  return process;
}

Denoiser model_denoiser(LanguageModel model, const DiffusionProcess& process) {
  return [model, shifted = process.shifted_outputs](const torch::Tensor& z, const torch::Tensor& sigma) mutable {
    WindowInputs window;
    window.mask = MaskMode::bidirectional;
    if (model->config().time_conditioning) window.noise_level = sigma.to(torch::kFloat);
    const auto logits = model->forward(z, window);
    return shifted ? outputs_shifted_right(logits) : logits;
  };
}

namespace {

const std::vector<std::pair<std::string, DiffusionMethod>> kDiffusionMethods = {
    {"ancestral", DiffusionMethod::ancestral}, {"confidence", DiffusionMethod::confidence},
    {"adaptive", DiffusionMethod::adaptive}};
const std::vector<std::pair<std::string, NoiseRemoval>> kNoiseRemovals = {
    {"ancestral", NoiseRemoval::ancestral}, {"greedy", NoiseRemoval::greedy}, {"none", NoiseRemoval::none}};

template <typename Value>
std::vector<std::string> names_of(const std::vector<std::pair<std::string, Value>>& table) {
  std::vector<std::string> names;
  for (const auto& entry : table) names.push_back(entry.first);
  return names;
}

template <typename Value>
Value value_named(const std::vector<std::pair<std::string, Value>>& table, const std::string& name, const char* key) {
  for (const auto& [entry_name, value] : table)
    if (entry_name == name) return value;
  throw InputError(fmt::format("{} = '{}' is not one of: {}", key, name, fmt::join(names_of(table), ", ")));
}

}  // namespace

std::vector<std::string> diffusion_method_names() { return names_of(kDiffusionMethods); }
std::vector<std::string> noise_removal_names() { return names_of(kNoiseRemovals); }

DiffusionMethod diffusion_method_from_name(const std::string& name, const char* key) {
  return value_named(kDiffusionMethods, name, key);
}

NoiseRemoval noise_removal_from_name(const std::string& name, const char* key) {
  return value_named(kNoiseRemovals, name, key);
}

void check_trajectory_recording(const DiffusionSampleOptions& options) {
  if (options.record_trajectory &&
      (options.method != DiffusionMethod::ancestral || options.noise_removal == NoiseRemoval::greedy ||
       options.filter.top_k > 0 || options.filter.top_p < 1 || options.filter.min_p > 0 || options.filter.temperature == 0))
    throw InputError("a recorded diffusion trajectory needs the ancestral sampler, ancestral or no noise removal, "
                     "and no top-k, top-p, min-p or temperature 0: every draw must have a probability under x̂");
}

DiffusionSampleResult sample_diffusion(const Denoiser& denoiser, const DiffusionProcess& process,
                                       const DiffusionCanvas& canvas, const DiffusionSampleOptions& options,
                                       torch::Device device) {
  if (options.steps < 1) throw InputError(fmt::format("diffusion steps = {} must be >= 1", options.steps));
  check_sampling_params(options.filter);
  if (!(options.filter.min_p >= 0 && options.filter.min_p < 1))
    throw InputError(fmt::format("min_p = {} must be in [0, 1)", options.filter.min_p));
  if (options.filter.min_p > 0 && !options.fused) throw InputError("min_p needs the fused diffusion step");
  if (!(options.confidence_threshold >= 0 && options.confidence_threshold <= 1))
    throw InputError(fmt::format("sample.confidence_threshold = {} must be in [0, 1]", options.confidence_threshold));
  if (options.confidence_threshold > 0 && options.method == DiffusionMethod::ancestral)
    throw InputError(fmt::format("sample.confidence_threshold = {} needs the confidence or adaptive sampler "
                                 "(sample.diffusion_sampler); ancestral steps commit no positions",
                                 options.confidence_threshold));
  if (process.noise->masks() && process.mask_id < 0)
    throw InputError("diffusion noise that masks needs a tokenizer with a mask token");
  check_trajectory_recording(options);
  const auto start_time = std::chrono::steady_clock::now();
  c10::InferenceMode inference;
  auto generator = at::globalContext().defaultGenerator(device).clone();
  generator.set_current_seed(static_cast<uint64_t>(options.seed));

  // adaptive: one more position, fixed to end of text, after the window (docs/diffusion.md, "Adaptive sampling").
  const bool anchored = options.method == DiffusionMethod::adaptive;
  if (anchored && process.end_id < 0) throw InputError("the adaptive sampler needs a tokenizer with an eos token");
  const auto fixed_tokens =
      anchored ? torch::cat({canvas.tokens, torch::full({canvas.tokens.size(0), 1}, process.end_id, torch::kLong)}, 1)
                     .to(device)
               : canvas.tokens.to(device);
  const auto fixed = anchored ? torch::cat({canvas.fixed, torch::ones({canvas.fixed.size(0), 1}, torch::kBool)}, 1)
                                    .to(device)
                              : canvas.fixed.to(device);
  const int64_t rows = fixed_tokens.size(0);
  const auto support = process.support->member_mask(device);
  const auto sequences = torch::arange(options.first_sequence, options.first_sequence + rows, torch::kLong);
  const auto sequences_on_device = sequences.to(device);

  // The prior (objectives/diffusion_objective.h): the keyed draws of the fused step, or the generator's.
  const double mask_share = prior_mask_share(*process.noise);
  const auto prior = options.fused && mask_share < 1.0
                         ? keyed_prior_tokens(support, sequences, fixed_tokens.size(1),
                                              static_cast<uint64_t>(options.seed), mask_share, process.mask_id)
                               .to(device)
                         : prior_tokens(*process.noise, *process.support, process.mask_id, fixed_tokens, &generator);
  auto z = torch::where(fixed, fixed_tokens, prior);
  auto open = ~fixed;  // confidence sampling: positions not committed yet
  const auto free_count = open.sum(-1);

  DiffusionSampleResult result;
  torch::Tensor logits, logits_input;
  // The denoiser's logits for the current z at time t; reused while z is unchanged and the denoiser ignores t
  // (docs/diffusion.md, "Reusing the model output").
  auto denoise = [&](double t) {
    if (logits.defined() && !process.time_conditioned && z.equal(logits_input)) return logits;
    const double sigma = -std::log(process.noise->levels_at(t).keep);
    logits = denoiser(z, torch::full({rows}, sigma, torch::dtype(torch::kDouble).device(device)));
    if (logits.scalar_type() != torch::kFloat && logits.scalar_type() != torch::kBFloat16)
      logits = logits.to(torch::kFloat);
    ++result.model_calls;
    logits_input = z.clone();
    return logits;
  };
  // One draw per position from q(z_s | z_t, x̂) for the levels at t and s (at_t.keep = 0 and at_s = clean: from x̂
  // itself, the noise's mass at t only deciding which positions are settled).
  auto draw = [&](const torch::Tensor& step_logits, const NoiseLevelsAt& at_t, const NoiseLevelsAt& at_s,
                  uint32_t step) {
    if (options.fused) {
      kernels::DiffusionRowParams p;
      p.temperature = options.filter.temperature;
      p.top_k = options.filter.top_k;
      p.top_p = options.filter.top_p;
      p.min_p = options.filter.min_p;
      p.alpha_t = at_t.keep;
      p.alpha_s = at_s.keep;
      p.mask_t = at_t.mask;
      p.mask_s = at_s.mask;
      p.uniform_t = at_t.uniform;
      p.uniform_s = at_s.uniform;
      p.mask_id = process.mask_id;
      p.support_size = process.support->size();
      p.seed = static_cast<uint64_t>(options.seed);
      p.step = step;
      p.float32 = options.posterior_dtype == torch::kFloat;
      return fused_diffusion_step(step_logits, z, support, sequences_on_device, p);
    }
    const auto x_hat = clean_token_probs(step_logits, process, options.filter, options.posterior_dtype);
    return exponential_race(interpolating_posterior(x_hat, z, at_t, at_s, support, process.mask_id), generator);
  };

  // The recorded trajectory: each transition's states, time and levels, and the log-probability of its draws.
  std::vector<torch::Tensor> states;
  std::vector<double> times;
  std::vector<double> levels;
  torch::Tensor log_probs;
  auto record = [&](const torch::Tensor& step_logits, const torch::Tensor& before, double t, const NoiseLevelsAt& at_t,
                    const NoiseLevelsAt& at_s) {
    const auto x_hat = clean_token_probs(step_logits, process, options.filter, torch::kDouble);
    const auto as_levels = [&](const NoiseLevelsAt& at) {
      const auto number = [&](double v) { return torch::full({}, v, x_hat.options()); };
      return NoiseLevels{number(at.keep), number(at.mask), number(at.uniform)};
    };
    const auto step = transition_log_prob(x_hat.gather(-1, z.unsqueeze(-1)).squeeze(-1),
                                          x_hat.gather(-1, before.unsqueeze(-1)).squeeze(-1), before, z,
                                          as_levels(at_t), as_levels(at_s), process.mask_id, process.support->size())
                          .masked_fill(fixed, 0.0);
    log_probs = log_probs.defined() ? log_probs + step : step;
    states.push_back(z.cpu());
    times.push_back(t);
    levels.insert(levels.end(), {at_t.keep, at_t.mask, at_t.uniform, at_s.keep, at_s.mask, at_s.uniform});
  };
  if (options.record_trajectory) states.push_back(z.cpu());

  // Confidence scores come from x̂ as filtered, but at temperature 0 from the model's own x̂: the point mass on the
  // argmax would give every position the same margin.
  SamplingParams score_filter = options.filter;
  if (score_filter.temperature == 0) score_filter.temperature = 1;
  const int64_t steps = options.steps;
  const NoiseLevelsAt clean_text;  // α = 1
  // x̂ itself: no signal at t, and the noise's mass where it has any, so only settled positions stay.
  const NoiseLevelsAt from_estimate{0.0, process.noise->masks() ? 1.0 : 0.0, process.noise->spreads() ? 1.0 : 0.0};
  for (int64_t k = 0; k < steps; ++k) {
    const double t = 1.0 - (1.0 - options.t_end) * static_cast<double>(k) / steps;
    const double s = 1.0 - (1.0 - options.t_end) * static_cast<double>(k + 1) / steps;
    const auto step_logits = denoise(t);
    const auto step = static_cast<uint32_t>(k);
    const auto before = z;
    if (options.method == DiffusionMethod::ancestral) {
      z = draw(step_logits, process.noise->levels_at(t), process.noise->levels_at(s), step);
    } else {
      const auto drawn = draw(step_logits, from_estimate, clean_text, step);
      confidence_step(z, open, clean_token_probs(step_logits, process, score_filter, options.posterior_dtype),
                      commits_at_step(free_count, k, steps), drawn, options.confidence_threshold);
    }
    z = torch::where(fixed, fixed_tokens, z);
    // Recording is for the ancestral sampler alone (check_trajectory_recording).
    if (options.record_trajectory) record(step_logits, before, t, process.noise->levels_at(t), process.noise->levels_at(s));
    // With a threshold, rows may commit every position before the last step; the steps left would change nothing.
    const bool all_committed = options.confidence_threshold > 0 && !open.any().item<bool>();
    if (options.on_trace && options.trace_every > 0 &&
        ((k + 1) % options.trace_every == 0 || k + 1 == steps || all_committed))
      options.on_trace(k + 1, z);
    if (all_committed) break;
  }

  // The last step from t_end to clean text (docs/diffusion.md, "Final step"); confidence sampling has committed
  // every position already.
  if (options.method == DiffusionMethod::ancestral && options.noise_removal != NoiseRemoval::none) {
    const auto final_logits = denoise(options.t_end);
    const auto clean =
        options.noise_removal == NoiseRemoval::greedy
            ? process.support->restrict_logits(final_logits.to(torch::kFloat)).argmax(-1)
            : draw(final_logits, process.noise->levels_at(options.t_end), clean_text, static_cast<uint32_t>(steps));
    // Noise that never draws tokens never changes a position that holds one (docs/diffusion.md, "Final step").
    const auto settled = process.noise->spreads() ? fixed : z.ne(process.mask_id);
    const auto before = z;
    z = torch::where(settled | fixed, z, clean);
    if (options.record_trajectory)
      record(final_logits, before, options.t_end, process.noise->levels_at(options.t_end), clean_text);
  }
  if (options.record_trajectory) {
    result.trajectory = torch::stack(states, 1);
    result.transition_times = torch::tensor(times, torch::kDouble);
    result.transition_levels = torch::tensor(levels, torch::kDouble).view({-1, 6});
    result.log_probs = log_probs.defined() ? log_probs.cpu() : torch::zeros(fixed.sizes(), torch::kDouble);
  }

  result.tokens = anchored ? z.narrow(1, 0, canvas.tokens.size(1)).cpu().contiguous() : z.cpu();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  return result;
}

std::vector<int32_t> generated_until_end(const torch::Tensor& row, const torch::Tensor& fixed, int64_t end_id) {
  const auto ids = row.to(torch::kLong).contiguous();
  const auto open = fixed.logical_not().contiguous();
  const auto id_at = ids.accessor<int64_t, 1>();
  const auto open_at = open.accessor<bool, 1>();
  std::vector<int32_t> out;
  for (int64_t i = 0; i < ids.size(0); ++i) {
    if (!open_at[i]) continue;
    if (id_at[i] == end_id) break;
    out.push_back(static_cast<int32_t>(id_at[i]));
  }
  return out;
}

double unigram_entropy(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) return 0.0;
  std::map<int32_t, int64_t> counts;
  for (int32_t id : tokens) ++counts[id];
  const double length = static_cast<double>(tokens.size());
  double entropy = 0.0;
  for (const auto& [id, count] : counts) {
    const double p = static_cast<double>(count) / length;
    entropy -= p * std::log(p);
  }
  return entropy;
}

}  // namespace inkstone
