#include "sampler/ar_sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "core/platform.h"
#include "models/model_dims.h"
#include "sampler/decode_step.h"

namespace inkstone {
namespace {

void check_inputs(const LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                  const ArSampleOptions& options) {
  if (prompts.empty()) throw InputError("sampling needs at least one prompt");
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (prompts[p].empty()) throw InputError(fmt::format("prompt {} is empty; start it with a token (e.g. bos)", p));
    for (int32_t id : prompts[p]) {
      if (id < 0 || id >= model->vocab_size())
        throw InputError(fmt::format("prompt {} has token id {} outside the vocabulary [0, {})", p, id,
                                     model->vocab_size()));
    }
  }
  const auto& s = options.sampling;
  if (options.num_samples < 1) throw InputError("sample.num must be >= 1");
  if (options.max_new_tokens < 1) throw InputError("sample.max_new_tokens must be >= 1");
  // Positions past the trained length have no meaning (RoPE never saw them) and the cache would grow unbounded.
  const int64_t max_len = model->config().max_seq_len;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto length = static_cast<int64_t>(prompts[p].size());
    if (length + options.max_new_tokens > max_len)
      throw InputError(fmt::format("prompt {} has {} tokens: with max_new_tokens = {} that is {} positions, more than "
                                   "model.max_seq_len = {}; shorten the prompt or lower max_new_tokens",
                                   p, length, options.max_new_tokens, length + options.max_new_tokens, max_len));
  }
  // The KV cache of every row at full length, plus a few [rows, V] float rows of logits per step.
  const ModelConfig& m = model->config();
  const double rows = static_cast<double>(prompts.size()) * static_cast<double>(options.num_samples);
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  const double length = static_cast<double>(longest) + static_cast<double>(options.max_new_tokens);
  const double cache = 2.0 * m.n_layers * rows * length * m.n_kv_heads * resolved_head_dim(m) * 4;
  require_memory(cache + 4.0 * rows * model->vocab_size() * 4, model->parameters().front().device(),
                 fmt::format("sampling {} rows of {} positions", rows, length));
  check_sampling_params(s);
  if (options.decode == DecodeMode::cuda_graph) {
    if (!model->parameters().front().device().is_cuda()) throw InputError("CUDA graph decoding needs a CUDA device");
    const auto obstacle = graph_decode_obstacle(m);
    if (!obstacle.empty()) throw InputError("CUDA graph decoding cannot capture this model: " + obstacle);
    if (!options.use_kv_cache) throw InputError("CUDA graph decoding needs the KV cache");
  }
}

// The fixed-window decoder the options ask for, or none (growing cache, or no cache at all).
std::unique_ptr<FixedWindowDecoder> make_decoder(LanguageModel& model, KVCache& cache, int64_t rows,
                                                 const ArSampleOptions& options) {
  if (!options.use_kv_cache) return nullptr;
  switch (options.decode) {
    case DecodeMode::growing_cache: return nullptr;
    case DecodeMode::fixed_window: return std::make_unique<FixedWindowDecoder>(model, cache, rows, false);
    case DecodeMode::cuda_graph: return std::make_unique<FixedWindowDecoder>(model, cache, rows, true);
    case DecodeMode::automatic: break;
  }
  const bool graph = model->parameters().front().device().is_cuda() && graph_decode_obstacle(model->config()).empty();
  return graph ? std::make_unique<FixedWindowDecoder>(model, cache, rows, true) : nullptr;
}

// Every row of the batch: its prompt left-padded to the longest, the padding marked, positions 0..len−1.
struct PaddedBatch {
  torch::Tensor tokens;     // [N, P] int64
  torch::Tensor real;       // [N, P] bool
  torch::Tensor positions;  // [N, P] int64
  torch::Tensor lengths;    // [N] int64
};

PaddedBatch left_pad(const std::vector<std::vector<int32_t>>& prompts, int64_t num_samples, torch::Device device) {
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  const int64_t rows = static_cast<int64_t>(prompts.size()) * num_samples;
  const int64_t width = static_cast<int64_t>(longest);
  auto tokens = torch::zeros({rows, width}, torch::kLong);
  auto lengths = torch::empty({rows}, torch::kLong);
  auto tokens_at = tokens.accessor<int64_t, 2>();
  auto lengths_at = lengths.accessor<int64_t, 1>();
  for (int64_t r = 0; r < rows; ++r) {
    const auto& prompt = prompts[r / num_samples];
    const int64_t pad = width - static_cast<int64_t>(prompt.size());
    for (size_t i = 0; i < prompt.size(); ++i) tokens_at[r][pad + static_cast<int64_t>(i)] = prompt[i];
    lengths_at[r] = static_cast<int64_t>(prompt.size());
  }
  const auto slot = torch::arange(width, torch::kLong).unsqueeze(0);
  const auto first_real = (width - lengths).unsqueeze(1);
  return {tokens.to(device), (slot >= first_real).to(device), (slot - first_real).clamp_min(0).to(device),
          lengths.to(device)};
}

// Cuts each row after its first end id or its stop step and turns it into a sample.
std::vector<ArSample> collect(const torch::Tensor& tokens, const torch::Tensor& log_probs, int64_t steps,
                              int64_t num_samples, const std::vector<int32_t>& end_ids,
                              const std::vector<int64_t>& stop_steps) {
  const auto host_tokens = tokens.narrow(1, 0, steps).cpu();
  const auto host_log_probs = log_probs.narrow(1, 0, steps).cpu();
  const auto t = host_tokens.accessor<int64_t, 2>();
  const auto lp = host_log_probs.accessor<float, 2>();
  std::vector<ArSample> samples(static_cast<size_t>(t.size(0)));
  for (int64_t r = 0; r < t.size(0); ++r) {
    auto& sample = samples[r];
    sample.prompt_index = r / num_samples;
    for (int64_t i = 0; i < steps; ++i) {
      sample.tokens.push_back(static_cast<int32_t>(t[r][i]));
      sample.log_probs.push_back(lp[r][i]);
      if (std::find(end_ids.begin(), end_ids.end(), t[r][i]) != end_ids.end()) {
        sample.finish = FinishReason::eos;
        break;
      }
      if (i == stop_steps[r]) {
        sample.finish = FinishReason::stop;
        break;
      }
    }
  }
  return samples;
}

// Rows whose stop_when turned true at this step: their generated tokens so far are kept on the host.
class StopTracker {
 public:
  StopTracker(const ArSampleOptions& options, int64_t rows)
      : options_(options), generated_(static_cast<size_t>(rows)), stop_steps_(static_cast<size_t>(rows), -1) {}

  bool active() const { return static_cast<bool>(options_.stop_when); }

  // Marks rows that stop at `step` in `finished` (rows already finished are left alone).
  void update(const torch::Tensor& drawn, int64_t step, torch::Tensor& finished) {
    const auto host_drawn = drawn.cpu();
    const auto host_finished = finished.cpu();
    auto newly = torch::zeros_like(host_finished);
    const auto drawn_at = host_drawn.accessor<int64_t, 1>();
    const auto finished_at = host_finished.accessor<bool, 1>();
    auto newly_at = newly.accessor<bool, 1>();
    for (int64_t r = 0; r < drawn_at.size(0); ++r) {
      if (finished_at[r]) continue;
      auto& row = generated_[static_cast<size_t>(r)];
      row.push_back(static_cast<int32_t>(drawn_at[r]));
      if (options_.stop_when(row)) {
        stop_steps_[static_cast<size_t>(r)] = step;
        newly_at[r] = true;
      }
    }
    finished |= newly.to(finished.device());
  }

  const std::vector<int64_t>& stop_steps() const { return stop_steps_; }

 private:
  const ArSampleOptions& options_;
  std::vector<std::vector<int32_t>> generated_;
  std::vector<int64_t> stop_steps_;
};

}  // namespace

std::string to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::eos: return "eos";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
  }
  return "length";
}

ArSampleResult sample_autoregressive(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                     const ArSampleOptions& options) {
  check_inputs(model, prompts, options);
  const auto start_time = std::chrono::steady_clock::now();
  c10::InferenceMode inference;
  const auto device = model->parameters().front().device();
  auto generator = at::globalContext().defaultGenerator(device).clone();
  generator.set_current_seed(static_cast<uint64_t>(options.seed));

  const auto batch = left_pad(prompts, options.num_samples, device);
  const int64_t rows = batch.tokens.size(0);
  const int64_t max_new = options.max_new_tokens;
  auto drawn = torch::empty({rows, max_new}, batch.tokens.options());
  auto drawn_log_probs = torch::empty({rows, max_new}, batch.tokens.options().dtype(torch::kFloat));
  auto finished = torch::zeros({rows}, batch.real.options());

  // With a cache the prompt is prefilled once and each step feeds only the newest token; without one, every
  // step runs the whole sequence so far.
  auto cache = model->make_kv_cache(rows, batch.tokens.size(1) + max_new);
  auto sequence = batch.tokens;
  // The head runs on the last position only: the one whose logits are drawn from.
  const auto last_logits = [&](const torch::Tensor& hidden) {
    return model->logits(hidden.select(1, -1), HeadRows::tokens);
  };
  WindowInputs window;  // without a cache: the whole sequence so far, every step
  window.positions = batch.positions;
  window.key_padding = batch.real;
  auto logits = options.use_kv_cache
                    ? last_logits(model->extend_cache(sequence, cache, {MaskMode::causal, batch.positions, batch.real}))
                    : last_logits(model->hidden_states(sequence, window));
  const auto decoder = make_decoder(model, cache, rows, options);

  StopTracker stops(options, rows);
  int64_t steps = 0;
  while (steps < max_new) {
    const auto draw = draw_tokens(logits, options.sampling, generator);
    drawn.select(1, steps).copy_(draw.tokens);
    drawn_log_probs.select(1, steps).copy_(draw.log_probs);
    if (stops.active()) stops.update(draw.tokens, steps, finished);
    ++steps;
    for (const int32_t end_id : options.end_ids) finished |= draw.tokens == end_id;
    if ((!options.end_ids.empty() || stops.active()) && finished.all().item<bool>()) break;
    if (steps == max_new) break;

    const auto token = draw.tokens.unsqueeze(1);
    const auto position = (batch.lengths + (steps - 1)).unsqueeze(1);
    if (decoder) {
      logits = decoder->step(draw.tokens, position);
    } else if (options.use_kv_cache) {
      logits = last_logits(model->extend_cache(token, cache, {MaskMode::causal, position, {}}));
    } else {
      sequence = torch::cat({sequence, token}, 1);
      window.positions = torch::cat({window.positions, position}, 1);
      window.key_padding = torch::cat({window.key_padding, torch::ones_like(token, batch.real.options())}, 1);
      logits = last_logits(model->hidden_states(sequence, window));
    }
  }

  ArSampleResult result;
  result.samples = collect(drawn, drawn_log_probs, steps, options.num_samples, options.end_ids,
                           stops.stop_steps());
  for (const auto& sample : result.samples) result.generated_tokens += static_cast<int64_t>(sample.tokens.size());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
  result.tokens_per_s = result.generated_tokens / std::max(result.seconds, 1e-9);
  result.cuda_graph = decoder && decoder->graphed();
  return result;
}

}  // namespace inkstone
