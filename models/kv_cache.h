// Keys and values of every attention layer (and the recent inputs of every convolution) kept across forwards, for
// incremental decoding: prefill the prompt once, then feed one new token per step.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace inkstone {

// A KV cache kept from one sampling call to the next is sized in whole steps of this many slots, so that calls
// whose prompts differ by a few tokens share it (sampler/row_decoders.h, KeptRowDecoder; the RL dry run counts it
// so): the slots it is made with for `slots` needed.
inline constexpr int64_t kKeptCacheSlotStep = 64;
inline int64_t kept_cache_slots(int64_t slots) {
  return (slots + kKeptCacheSlotStep - 1) / kKeptCacheSlotStep * kKeptCacheSlotStep;
}

// Steps between a CUDA decoder's host reads of its rows' ends (sampler/ar_sampler.cpp): a row may run this many
// steps past its end, so its cache holds as many slots beyond its prompt and new tokens (the RL dry run counts
// them).
inline constexpr int64_t kCudaEndCheckInterval = 8;

// Per layer one preallocated [B, n_kv, T_max, h_d] buffer for K and one for V (allocated at the first append,
// with the dtype the layer produces), plus which slots hold real tokens. A forward over several tokens (prefill,
// append) shares its slots across the batch: prompts of different lengths are left-padded and carry their own
// positions (see CacheInputs), or are packed into one row and handed to rows of their own (adopt_segments);
// per-row decoding (append_at) gives each row its own slot.
class KVCache {
 public:
  // storage: the dtype keys and values are kept in; undefined: the dtype each layer produces.
  KVCache(int64_t num_layers, int64_t batch_size, int64_t capacity,
          std::optional<torch::ScalarType> storage = std::nullopt);

  int64_t length() const { return length_; }  // slots filled by earlier forwards
  int64_t capacity() const { return capacity_; }
  int64_t batch_size() const { return batch_size_; }

  // Records which of the next num_new slots are real tokens (key_padding [B, num_new] bool, undefined = all real)
  // and returns the record for all slots up to and including them, or undefined when no slot is padding.
  torch::Tensor record_key_real(const torch::Tensor& key_padding, int64_t num_new);

  // Stores one layer's k, v [B, n_kv, num_new, h_d] after the filled slots; returns K, V of all slots so far.
  std::pair<torch::Tensor, torch::Tensor> append(int64_t layer, const torch::Tensor& k, const torch::Tensor& v);

  // Per-row decoding (what a CUDA graph can replay: no shape or host value changes from step to step): one new
  // token per row goes to that row's slot `slots` ([rows] int64 on the cache's device, or [1] for every row) of the
  // buffers, and K, V of the slots below the read limit come back; window_key_real masks each row's slots past its
  // own. Rows refilled with another sequence (adopt_rows) restart at their own slot, so rows of one batch sit at
  // different lengths. The host-side length is not read: the caller advances it.
  std::pair<torch::Tensor, torch::Tensor> append_at(int64_t layer, const torch::Tensor& slots, const torch::Tensor& k,
                                                    const torch::Tensor& v);
  // [rows, read limit] bool: real tokens in each row's slots 0..slots[r] (earlier calls' padding stays masked).
  torch::Tensor window_key_real(const torch::Tensor& slots);
  // Slots a per-row step reads: 1 <= limit <= capacity (default capacity, what a graph needs); a caller that knows
  // every row's slot is below `limit` spares the attention the empty tail.
  void limit_reads(int64_t limit);

  // The leading `rows` rows are the batch from now on (the buffers keep batch_size() rows, so a graph captured on a
  // view of them stays valid).
  void use_rows(int64_t rows);
  int64_t rows() const { return rows_; }
  // Moves rows `kept` ([n] int64) to rows 0..n−1, in order (continuous batching compacts its finished rows away).
  void gather_rows(const torch::Tensor& kept);
  // Rows `targets` ([n] int64) take over the prefilled rows `sources` ([n] int64) of `prefill`: its slots
  // 0..prefill.length()−1, their padding record and convolution state.
  void adopt_rows(const torch::Tensor& targets, const KVCache& prefill, const torch::Tensor& sources);
  // Rows `targets` ([n] int64) take over stretches of a one-row prefill of packed prompts: row targets[i] gets its
  // slots starts[i]..starts[i]+lengths[i]−1 as slots 0..lengths[i]−1 (the slots above hold other prompts' keys until
  // the row writes them: a per-row step reads a row's slots up to its own, append_at). Attention caches only, and a
  // prefill without padding.
  void adopt_segments(const torch::Tensor& targets, const KVCache& prefill, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& lengths);

  // Convolution layers keep their last `history` inputs instead of keys and values, so their state does not grow
  // with the context. x: this call's inputs [B, num_new, C]; returns [B, history + num_new, C], the kept inputs
  // (zeros before the first token) followed by x, and keeps the last `history` rows for the next call.
  torch::Tensor conv_window(int64_t layer, const torch::Tensor& x, int64_t history);

  // Elements one layer holds (keys, values and convolution state).
  int64_t state_numel(int64_t layer) const;

  // Called once every layer has appended the new tokens.
  void advance(int64_t num_new);
  // Forgets the slots from `length` on, so that a forward can read the cache without joining it (block diffusion
  // denoises a block against the committed ones many times, then commits it once). Attention caches only: a
  // convolution's window cannot be wound back.
  void rewind(int64_t length);

 private:
  int64_t batch_size_;
  int64_t capacity_;
  int64_t rows_;        // the leading rows in use (use_rows)
  std::optional<torch::ScalarType> storage_;
  int64_t read_limit_;  // limit_reads
  int64_t length_ = 0;
  std::vector<torch::Tensor> keys_;
  std::vector<torch::Tensor> values_;
  std::vector<torch::Tensor> conv_states_;  // [B, history, C] per convolution layer
  torch::Tensor key_real_;  // [B, T_max] bool, allocated at the first padded record
  torch::Tensor slot_index_;  // [T_max] int64 0..T_max−1 on the device, for window_key_real
};

}  // namespace inkstone
