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
  // CUDA graphs captured so far (one per batch bucket the decoder has stepped).
  virtual int64_t graphs_captured() const { return 0; }
  // Whether restart() can ready the decoder for another call (per-row caches); the others are made per call.
  virtual bool restartable() const { return false; }
  // Makes every row idle again for a call that starts every row at once, keeping the cache's buffers and the
  // captured graphs.
  virtual void restart() {}
};

struct RowDecoderSpec {
  int64_t rows = 1;         // the batch
  int64_t capacity = 1;     // slots a row may fill: its prompt, its new tokens and the engine's slack
  bool use_kv_cache = true;  // false: every step recomputes every row's whole sequence (the benchmark baseline)
  DecodeMode decode = DecodeMode::automatic;
  std::optional<torch::ScalarType> cache_dtype;  // keys and values kept in this dtype; unset: the layers'
  // The graphs of larger buckets stay after a compaction, for a later call (a decoder kept across calls); false:
  // they are freed, since a call's buckets only shrink.
  bool keep_graphs = false;
};

// The decoder for this model and spec: a KV cache with a slot per row and step (per-row decoding), a KV cache
// whose slots all rows share (models with hidden streams, which decode several slots per token), or none.
std::unique_ptr<RowDecoder> make_row_decoder(LanguageModel model, const RowDecoderSpec& spec);

// A row decoder kept from one sampling call to the next (RL's training rollouts sample once per step): its KV cache
// and, on CUDA, its captured graphs, one per batch bucket, serve the next call whose spec fits (docs/sampling.md,
// "Decoders kept across calls"). A graph replays the addresses it recorded, so the decoder is replaced when the model
// is another one or any of its parameters, buffers or RoPE frequencies has moved or changed dtype or shape (ZeRO-3
// gathers and dtype casts may move them; optimizer steps write in place), as well as when the rows, the cache form or
// its dtype change, or the call needs more slots than the cache holds.
class KeptRowDecoder {
 public:
  // The decoder for one call: the kept one, restarted, when it fits `spec`; else a new one with room for
  // kept_cache_slots(spec.capacity) slots (models/kv_cache.h). The call hands it back with keep() once it has ended
  // normally; a call that fails drops it, so a half-captured graph is never replayed.
  std::unique_ptr<RowDecoder> take(const LanguageModel& model, const RowDecoderSpec& spec);
  // Keeps the decoder take() gave out, as `model` now is (its graphs captured), for the next call; a decoder that
  // cannot restart is freed.
  void keep(std::unique_ptr<RowDecoder> decoder, const LanguageModel& model);
  // Calls served by a decoder made for an earlier one.
  int64_t reuses() const { return reuses_; }

  // What a captured graph depends on in the model: the module, its ids, and the address, dtype and shape of every
  // tensor a forward reads.
  struct Footprint {
    const void* module = nullptr;
    int64_t token_count = 0;
    std::vector<const void*> addresses;
    std::vector<int64_t> layouts;  // per tensor its dtype and sizes, then −1
    bool operator==(const Footprint& other) const;
  };

 private:
  std::unique_ptr<RowDecoder> decoder_;
  RowDecoderSpec spec_;  // of the decoder given out or kept, with its rounded capacity
  Footprint footprint_;  // of the model when the decoder was kept
  int64_t reuses_ = 0;
};

}  // namespace inkstone
