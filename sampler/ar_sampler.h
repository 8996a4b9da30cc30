// Batched autoregressive generation from a language model, with a KV cache or by full recompute: the engine
// behind `inkstone sample` and the RL rollouts.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/language_model.h"
#include "sampler/sampling.h"

namespace inkstone {

// How a decode step runs with a KV cache. automatic: a replayed CUDA graph on CUDA when the model allows one
// (graph_decode_obstacle in sampler/decode_step.h), else a growing cache; growing_cache: attention reads the filled
// slots only (the fastest eager form); fixed_window: the graph's eager twin (every slot read, the unfilled ones
// masked); cuda_graph: the graph, refused where it cannot run.
enum class DecodeMode { automatic, growing_cache, fixed_window, cuda_graph };

struct ArSampleOptions {
  int64_t num_samples = 1;  // per prompt
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  int64_t seed = 0;           // same seed, same model, same device: same samples
  std::vector<int32_t> end_ids;  // a row stops after drawing any of these (eos, a chat model's end of turn); none:
                                 // rows run to max_new_tokens
  bool use_kv_cache = true;   // false: recompute the whole sequence every step (benchmark baseline)
  DecodeMode decode = DecodeMode::automatic;  // with the cache
  // Called on a row's generated tokens after each draw; true ends that row there (e.g. a stop string in the
  // decoded tail). Unset: no host copy per step.
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
};

// Runs every sample of every prompt as one batch on the model's device, under inference mode. Prompts are
// left-padded (CacheInputs). Throws InputError for an empty prompt, an id outside the vocabulary, or options
// out of range.
ArSampleResult sample_autoregressive(LanguageModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                     const ArSampleOptions& options);

}  // namespace inkstone
