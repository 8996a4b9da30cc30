// The model side of autoregressive decoding (sampler/ar_sampler.h): a batch of rows, each started on a prompt,
// fed one token per step, moved to the front when others finish. The engine draws, checks ends and hands out
// prompts; a decoder only turns tokens into next-token logits (docs/sampling.md, "Continuous batching").
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "models/language_model.h"

namespace inkstone {

// How a decode step runs with a KV cache. automatic: a replayed CUDA graph on CUDA when the model allows one
// (graph_decode_obstacle in sampler/decode_step.h), else growing_cache; growing_cache: attention reads each row's
// slots up to the longest row (the fastest eager form); fixed_window: the graph's eager twin (every slot read,
// each row's unfilled ones masked); cuda_graph: the graph, refused where it cannot run.
enum class DecodeMode { automatic, growing_cache, fixed_window, cuda_graph };

class RowDecoder {
 public:
  virtual ~RowDecoder() = default;
  // Starts rows[i] on *prompts[i] (rows naming one prompt share its prefill) and returns their next-token logits
  // [rows.size(), V] fp32 on the model's device.
  virtual torch::Tensor start(const std::vector<int64_t>& rows,
                              const std::vector<const std::vector<int32_t>*>& prompts) = 0;
  // Feeds one token per row in use ([rows in use] int64) and returns the next-token logits [rows in use, V] fp32,
  // valid until the next call.
  virtual torch::Tensor step(const torch::Tensor& tokens) = 0;
  // Row kept[i] becomes row i, and the first `rows` rows are the ones in use from now on.
  virtual void compact(const std::vector<int64_t>& kept, int64_t rows) = 0;
  // False: one start of every row and no compaction (the cache cannot give rows lengths of their own).
  virtual bool refills() const { return true; }
  virtual bool graphed() const { return false; }
  // Makes every row idle and unstarted again for another call, keeping the cache's buffers and the captured
  // graphs; false where a decoder cannot (then a new one is made).
  virtual bool restart() { return false; }
};

struct RowDecoderSpec {
  int64_t rows = 1;         // the batch
  int64_t capacity = 1;     // slots a row may fill: its prompt, its new tokens and the engine's slack
  bool use_kv_cache = true;  // false: every step recomputes every row's whole sequence (the benchmark baseline)
  DecodeMode decode = DecodeMode::automatic;
  std::optional<torch::ScalarType> cache_dtype;  // keys and values kept in this dtype; unset: the layers'
};

// The decoder for this model and spec: a KV cache with a slot per row and step (per-row decoding), a KV cache
// whose slots all rows share (models with hidden streams, which decode several slots per token), or none.
std::unique_ptr<RowDecoder> make_row_decoder(LanguageModel model, const RowDecoderSpec& spec);

// A row decoder kept from one sampling call to the next (RL rollouts sample once per step): its KV cache and, on
// CUDA, its captured graphs, one per batch bucket, serve the next call whose spec fits (docs/sampling.md,
// "Decoders kept across calls"). A graph reads the weights at the addresses they had when it was captured, so the
// decoder is replaced when any parameter or buffer of the model has moved (ZeRO-3 gathers, a dtype cast) as well
// as when the rows, the cache form or its dtype change, or the call needs more slots than the cache holds.
class KeptRowDecoder {
 public:
  // The kept decoder, restarted, when it fits `spec`; else a new one, with room for `spec.capacity` rounded up to
  // a multiple of kKeptCacheSlotStep (models/kv_cache.h), which is kept from now on.
  RowDecoder& acquire(const LanguageModel& model, const RowDecoderSpec& spec);
  // Calls served by a decoder made for an earlier one.
  int64_t reuses() const { return reuses_; }

 private:
  bool fits(const LanguageModel& model, const RowDecoderSpec& spec) const;

  std::unique_ptr<RowDecoder> decoder_;
  RowDecoderSpec spec_;
  std::vector<const void*> addresses_;  // of the model's parameters and buffers when the decoder was made
  int64_t reuses_ = 0;
};

}  // namespace inkstone
