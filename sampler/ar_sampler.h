// Batched autoregressive generation from a language model, with a KV cache or by full recompute: the engine
// behind `inkstone sample` and the RL rollouts.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/language_model.h"
#include "sampler/row_decoders.h"
#include "sampler/sampling.h"

namespace inkstone {

struct ArSampleOptions {
  int64_t num_samples = 1;  // per prompt
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  // Draws are keyed by (seed, prompt key, sample index, position): prompt p's key is first_prompt + p, so a
  // sample does not depend on the batch, the rows decoded at once, the order rows are refilled in, or the device.
  int64_t seed = 0;
  int64_t first_prompt = 0;
  std::vector<int32_t> end_ids;  // a row stops after drawing any of these (eos, a chat model's end of turn); none:
                                 // rows run to max_new_tokens
  // Rows decoded at once (0: every sample of every prompt). A row that finishes takes the next waiting sample at
  // once (continuous batching); once none waits, finished rows are compacted away into a smaller batch bucket.
  int64_t max_rows = 0;
  bool continuous = true;     // false: one batch of every sample, run until its last row ends (the engine before
                              // continuous batching; the benchmark's baseline)
  bool use_kv_cache = true;   // false: recompute the whole sequence every step (benchmark baseline)
  DecodeMode decode = DecodeMode::automatic;  // with the cache
  std::optional<torch::ScalarType> cache_dtype;  // the KV cache's keys and values in this dtype (bf16: half an fp32
                                                 // model's cache); unset: as the layers compute them
  // Called on a row's generated tokens (each prefix since the last check, in order); true ends that row there
  // (e.g. a stop string in the decoded tail). Unset: only end ids and the length end a row.
  std::function<bool(const std::vector<int32_t>& generated)> stop_when;
};

enum class FinishReason { eos, stop, length };
std::string to_string(FinishReason reason);

struct ArSample {
  int64_t prompt_index = 0;
  std::vector<int32_t> tokens;   // generated ids without the prompt; ends with an end id (finish == eos) or with the
                                 // token that made stop_when true (finish == stop)
  std::vector<float> log_probs;  // of each token under the sampling distribution (0 for greedy)
  FinishReason finish = FinishReason::length;
};

struct ArSampleResult {
  std::vector<ArSample> samples;  // prompt-major: samples[p * num_samples + s]
  int64_t generated_tokens = 0;
  double seconds = 0;             // prefill and decode, wall clock
  double tokens_per_s = 0;        // generated_tokens / seconds
  bool cuda_graph = false;        // the decode steps replayed a captured CUDA graph
  int64_t graphs_captured = 0;    // graphs this call captured (a kept decoder replays earlier calls' graphs)
};

// Runs every sample of every prompt on the model's device, under inference mode, max_rows rows at a time
// (docs/sampling.md, "Continuous batching"). Throws InputError for an empty prompt, an id outside the vocabulary,
// or options out of range. `kept`: the decoder (KV cache, CUDA graphs) comes from there and stays there for the
// next call; none: this call's own.
ArSampleResult sample_autoregressive(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                     const ArSampleOptions& options, KeptRowDecoder* kept = nullptr);

}  // namespace inkstone
