#include "sampler/row_decoders.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <torch/torch.h>

#include "models/block_registry.h"
#include "models/kv_cache.h"
#include "sampler/decode_step.h"

namespace inkstone {
namespace {

// Prompts left-padded to the longest, the padding marked, positions 0..len−1 of each.
struct PaddedPrompts {
  torch::Tensor tokens;     // [N, P] int64
  torch::Tensor real;       // [N, P] bool
  torch::Tensor positions;  // [N, P] int64
  torch::Tensor lengths;    // [N] int64
};

template <typename Id>
PaddedPrompts left_pad(const std::vector<const std::vector<Id>*>& prompts, torch::Device device) {
  size_t longest = 0;
  for (const auto* prompt : prompts) longest = std::max(longest, prompt->size());
  const auto rows = static_cast<int64_t>(prompts.size());
  const auto width = static_cast<int64_t>(longest);
  auto tokens = torch::zeros({rows, width}, torch::kLong);
  auto lengths = torch::empty({rows}, torch::kLong);
  auto tokens_at = tokens.accessor<int64_t, 2>();
  auto lengths_at = lengths.accessor<int64_t, 1>();
  for (int64_t r = 0; r < rows; ++r) {
    const auto& prompt = *prompts[r];
    const int64_t pad = width - static_cast<int64_t>(prompt.size());
    for (size_t i = 0; i < prompt.size(); ++i) tokens_at[r][pad + static_cast<int64_t>(i)] = prompt[i];
    lengths_at[r] = static_cast<int64_t>(prompt.size());
  }
  const auto slot = torch::arange(width, torch::kLong).unsqueeze(0);
  const auto first_real = (width - lengths).unsqueeze(1);
  return {tokens.to(device), (slot >= first_real).to(device), (slot - first_real).clamp_min(0).to(device),
          lengths.to(device)};
}

torch::Tensor index_tensor(const std::vector<int64_t>& values, torch::Device device) {
  return torch::tensor(values, torch::kLong).to(device);
}

// Prompts packed into one row, each a document at the positions 0..len−1 of its own tokens.
struct PackedPrompts {
  torch::Tensor tokens, positions;       // [1, Σ len] int64
  torch::Tensor documents;               // [1, Σ len] int64 on the host, where the model lays out its buckets
  torch::Tensor last;                    // [P] int64: where each prompt's last token sits in the row
  std::vector<int64_t> starts, lengths;  // per prompt, on the host
};

PackedPrompts pack(const std::vector<const std::vector<int32_t>*>& prompts, torch::Device device) {
  PackedPrompts packed;
  std::vector<int64_t> tokens, positions, documents, last;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto length = static_cast<int64_t>(prompts[p]->size());
    packed.starts.push_back(static_cast<int64_t>(tokens.size()));
    packed.lengths.push_back(length);
    for (int64_t i = 0; i < length; ++i) {
      tokens.push_back((*prompts[p])[static_cast<size_t>(i)]);
      positions.push_back(i);
      documents.push_back(static_cast<int64_t>(p));
    }
    last.push_back(static_cast<int64_t>(tokens.size()) - 1);
  }
  packed.tokens = index_tensor(tokens, device).view({1, -1});
  packed.positions = index_tensor(positions, device).view({1, -1});
  packed.documents = index_tensor(documents, torch::kCPU).view({1, -1});
  packed.last = index_tensor(last, device);
  return packed;
}

torch::Tensor last_logits(LanguageModel& model, const torch::Tensor& hidden) {
  return model->logits(hidden.select(1, -1), HeadRows::tokens);
}

// A KV cache with one slot counter per row: a row starts at slot 0 with its prompt's prefill (prompts named by
// several rows, the G samples of one prompt, are prefilled once and copied), then writes its own next slot each
// step; the attention mask reads each row's own slots (KVCache::append_at). The prompts of a start are packed into
// one row, each attending to its own tokens, so the prefill computes no padding and every row starts right after
// its own prompt; a model whose convolutions carry state from token to token left-pads them instead
// (docs/sampling.md, "Continuous batching").
class PerRowCacheDecoder : public RowDecoder {
 public:
  PerRowCacheDecoder(LanguageModel model, const RowDecoderSpec& spec, bool use_graph)
      : model_(std::move(model)),
        device_(model_->parameters().front().device()),
        cache_(model_->make_kv_cache(spec.rows, spec.capacity, spec.cache_dtype)),
        cache_dtype_(spec.cache_dtype),
        capacity_(spec.capacity),
        packs_prompts_(mixes_tokens_only_by_attention(model_->config())),
        read_every_slot_(spec.decode == DecodeMode::fixed_window || use_graph),
        use_graph_(use_graph),
        keep_graphs_(spec.keep_graphs),
        slots_(torch::zeros({spec.rows}, torch::TensorOptions().dtype(torch::kLong).device(device_))),
        positions_(torch::zeros_like(slots_)),
        host_slots_(static_cast<size_t>(spec.rows), 0) {}

  torch::Tensor start(const std::vector<int64_t>& rows,
                      const std::vector<const std::vector<int32_t>*>& prompts) override {
    std::map<const std::vector<int32_t>*, int64_t> unique;
    std::vector<const std::vector<int32_t>*> distinct;
    std::vector<int64_t> sources;
    for (const auto* prompt : prompts) {
      const auto [at, added] = unique.emplace(prompt, static_cast<int64_t>(distinct.size()));
      if (added) distinct.push_back(prompt);
      sources.push_back(at->second);
    }
    const auto targets = index_tensor(rows, device_);
    const auto from = index_tensor(sources, device_);
    // Per started row: the slot it writes next and that token's RoPE position.
    std::vector<int64_t> next_slots, next_positions;
    torch::Tensor logits;  // [distinct prompts, V]
    if (packs_prompts_) {
      const auto packed = pack(distinct, device_);
      KVCache prefill = model_->make_kv_cache(1, packed.tokens.size(1), cache_dtype_);
      const auto hidden = model_->extend_cache(packed.tokens, prefill,
                                               {MaskMode::causal, packed.positions, {}, packed.documents});
      logits = model_->logits(hidden[0].index_select(0, packed.last), HeadRows::tokens);
      std::vector<int64_t> starts;
      for (const int64_t source : sources) {
        starts.push_back(packed.starts[static_cast<size_t>(source)]);
        next_slots.push_back(packed.lengths[static_cast<size_t>(source)]);
      }
      cache_.adopt_segments(targets, prefill, starts, next_slots);
      next_positions = next_slots;
    } else {
      const auto batch = left_pad(distinct, device_);
      const int64_t width = batch.tokens.size(1);
      KVCache prefill = model_->make_kv_cache(static_cast<int64_t>(distinct.size()), width, cache_dtype_);
      logits = last_logits(model_,
                           model_->extend_cache(batch.tokens, prefill, {MaskMode::causal, batch.positions, batch.real}));
      cache_.adopt_rows(targets, prefill, from);
      for (const int64_t source : sources) {
        next_slots.push_back(width);
        next_positions.push_back(static_cast<int64_t>(distinct[static_cast<size_t>(source)]->size()));
      }
    }
    slots_.index_copy_(0, targets, index_tensor(next_slots, device_));
    positions_.index_copy_(0, targets, index_tensor(next_positions, device_));
    for (size_t i = 0; i < rows.size(); ++i) host_slots_[static_cast<size_t>(rows[i])] = next_slots[i];
    return logits.index_select(0, from);
  }

  torch::Tensor step(const torch::Tensor& tokens) override {
    const int64_t rows = cache_.rows();
    const auto slots = slots_.narrow(0, 0, rows);
    const auto positions = positions_.narrow(0, 0, rows);
    torch::Tensor logits;
    if (use_graph_) {
      auto& graph = graphs_[rows];
      if (!graph) {
        graph = std::make_unique<FixedWindowDecoder>(model_, cache_, rows, true);
        ++graphs_captured_;
      }
      logits = graph->step(tokens, positions, slots);
    } else {
      const auto longest = *std::max_element(host_slots_.begin(), host_slots_.begin() + rows);
      cache_.limit_reads(read_every_slot_ ? capacity_ : longest + 1);
      logits = last_logits(model_, model_->decode_at_slot(tokens.view({rows, 1}), positions.view({rows, 1}), cache_,
                                                          slots));
    }
    // A finished row that waits for a refill keeps stepping: its slot stays inside the cache.
    slots.add_(1).clamp_max_(capacity_ - 1);
    positions.add_(1).clamp_max_(capacity_ - 1);
    for (int64_t r = 0; r < rows; ++r)
      host_slots_[static_cast<size_t>(r)] = std::min(host_slots_[static_cast<size_t>(r)] + 1, capacity_ - 1);
    return logits;
  }

  void compact(const std::vector<int64_t>& kept, int64_t rows) override {
    // The bucket's idle rows become copies of the first kept row: their slots, positions and real keys then agree
    // with their cache, so no idle row reads only padding under the read limit (a softmax over no key is NaN).
    std::vector<int64_t> sources(kept);
    sources.resize(static_cast<size_t>(rows), kept.front());
    const auto index = index_tensor(sources, device_);
    cache_.gather_rows(index);
    for (auto* state : {&slots_, &positions_}) state->narrow(0, 0, rows).copy_(state->index_select(0, index));
    std::vector<int64_t> host(host_slots_.size(), 0);
    for (size_t i = 0; i < sources.size(); ++i) host[i] = host_slots_[static_cast<size_t>(sources[i])];
    host_slots_ = std::move(host);
    cache_.use_rows(rows);
    // A call's buckets only shrink: unless a later call replays them, the larger ones' graphs (and their memory
    // pools) are freed.
    if (!keep_graphs_) graphs_.erase(graphs_.upper_bound(rows), graphs_.end());
  }

  bool graphed() const override { return use_graph_; }
  int64_t graphs_captured() const override { return graphs_captured_; }
  bool restartable() const override { return true; }

  // Every row of the next call is started (adopt_segments or adopt_rows rewrites its slots from 0, its padding
  // record and convolution state), and the stale slots past a row's own are masked as after a refill; the graphs
  // of every bucket stay (each holds one step's buffers at its rows, all of them about twice the largest's).
  void restart() override {
    cache_.use_rows(cache_.batch_size());
    slots_.zero_();
    positions_.zero_();
    std::fill(host_slots_.begin(), host_slots_.end(), 0);
  }

 private:
  LanguageModel model_;
  torch::Device device_;
  KVCache cache_;
  std::optional<torch::ScalarType> cache_dtype_;
  int64_t capacity_;
  bool packs_prompts_;
  bool read_every_slot_;
  bool use_graph_;
  bool keep_graphs_;
  int64_t graphs_captured_ = 0;
  torch::Tensor slots_;      // [rows] int64: each row's next slot
  torch::Tensor positions_;  // [rows] int64: each row's next RoPE position
  std::vector<int64_t> host_slots_;  // the same slots, for the read limit
  std::map<int64_t, std::unique_ptr<FixedWindowDecoder>> graphs_;  // one per batch bucket
};

// A KV cache whose slots every row shares (left-padded prompts, one append per step): all rows start together
// and none is refilled. Models with hidden streams decode several slots per token this way.
class SharedCacheDecoder : public RowDecoder {
 public:
  SharedCacheDecoder(LanguageModel model, const RowDecoderSpec& spec)
      : model_(std::move(model)), cache_(model_->make_kv_cache(spec.rows, spec.capacity, spec.cache_dtype)) {}

  torch::Tensor start(const std::vector<int64_t>& rows,
                      const std::vector<const std::vector<int32_t>*>& prompts) override {
    TORCH_CHECK(cache_.length() == 0 && static_cast<int64_t>(rows.size()) == cache_.batch_size(),
                "a shared KV cache starts every row at once");
    const auto batch = left_pad(prompts, model_->parameters().front().device());
    positions_ = batch.lengths;
    return last_logits(model_,
                       model_->extend_cache(batch.tokens, cache_, {MaskMode::causal, batch.positions, batch.real}));
  }

  torch::Tensor step(const torch::Tensor& tokens) override {
    const auto logits = last_logits(model_, model_->extend_cache(tokens.unsqueeze(1), cache_,
                                                                 {MaskMode::causal, positions_.unsqueeze(1), {}}));
    positions_ = positions_ + 1;
    return logits;
  }

  void compact(const std::vector<int64_t>&, int64_t) override {
    TORCH_CHECK(false, "a shared KV cache keeps its rows");
  }

  bool refills() const override { return false; }

 private:
  LanguageModel model_;
  KVCache cache_;
  torch::Tensor positions_;  // [rows] int64
};

// No cache: every step runs each row's whole sequence so far (left-padded), the baseline the cache is measured
// against.
class RecomputeDecoder : public RowDecoder {
 public:
  RecomputeDecoder(LanguageModel model, const RowDecoderSpec& spec)
      : model_(std::move(model)), sequences_(static_cast<size_t>(spec.rows)), rows_(spec.rows) {}

  torch::Tensor start(const std::vector<int64_t>& rows,
                      const std::vector<const std::vector<int32_t>*>& prompts) override {
    for (size_t i = 0; i < rows.size(); ++i)
      sequences_[static_cast<size_t>(rows[i])].assign(prompts[i]->begin(), prompts[i]->end());
    return run(rows);
  }

  torch::Tensor step(const torch::Tensor& tokens) override {
    const auto host = tokens.cpu();
    const auto drawn = host.accessor<int64_t, 1>();
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < rows_; ++r) {
      sequences_[static_cast<size_t>(r)].push_back(drawn[r]);
      rows.push_back(r);
    }
    return run(rows);
  }

  void compact(const std::vector<int64_t>& kept, int64_t rows) override {
    std::vector<std::vector<int64_t>> moved(sequences_.size());
    for (size_t i = 0; i < kept.size(); ++i) moved[i] = std::move(sequences_[static_cast<size_t>(kept[i])]);
    sequences_ = std::move(moved);
    rows_ = rows;
  }

 private:
  torch::Tensor run(const std::vector<int64_t>& rows) {
    std::vector<const std::vector<int64_t>*> sequences;
    for (const int64_t r : rows) sequences.push_back(&sequences_[static_cast<size_t>(r)]);
    const auto batch = left_pad(sequences, model_->parameters().front().device());
    WindowInputs window;
    window.positions = batch.positions;
    window.key_padding = batch.real;
    return last_logits(model_, model_->hidden_states(batch.tokens, window));
  }

  LanguageModel model_;
  std::vector<std::vector<int64_t>> sequences_;  // per row: prompt and tokens so far
  int64_t rows_;
};

KeptRowDecoder::Footprint footprint_of(const LanguageModel& model) {
  KeptRowDecoder::Footprint footprint;
  footprint.module = model.get();
  footprint.token_count = model->token_count();
  auto add = [&](const torch::Tensor& tensor) {
    footprint.addresses.push_back(tensor.data_ptr());
    footprint.layouts.push_back(static_cast<int64_t>(tensor.scalar_type()));
    for (const int64_t size : tensor.sizes()) footprint.layouts.push_back(size);
    footprint.layouts.push_back(-1);
  };
  for (const auto& tensor : model->parameters()) add(tensor);
  for (const auto& tensor : model->buffers()) add(tensor);
  add(model->rope_omega());
  return footprint;
}

}  // namespace

bool KeptRowDecoder::Footprint::operator==(const Footprint& other) const {
  return std::tie(module, token_count, addresses, layouts) ==
         std::tie(other.module, other.token_count, other.addresses, other.layouts);
}

std::unique_ptr<RowDecoder> KeptRowDecoder::take(const LanguageModel& model, const RowDecoderSpec& spec) {
  const bool fits = decoder_ && spec.rows == spec_.rows && spec.capacity <= spec_.capacity &&
                    spec.use_kv_cache == spec_.use_kv_cache && spec.decode == spec_.decode &&
                    spec.cache_dtype == spec_.cache_dtype && footprint_of(model) == footprint_;
  if (fits) {
    ++reuses_;
    decoder_->restart();
    return std::move(decoder_);
  }
  decoder_.reset();  // its cache and graphs go before the new ones are allocated
  spec_ = spec;
  spec_.capacity = kept_cache_slots(spec.capacity);
  spec_.keep_graphs = true;
  return make_row_decoder(model, spec_);
}

void KeptRowDecoder::keep(std::unique_ptr<RowDecoder> decoder, const LanguageModel& model) {
  if (!decoder || !decoder->restartable()) return;
  decoder_ = std::move(decoder);
  footprint_ = footprint_of(model);
}

std::unique_ptr<RowDecoder> make_row_decoder(LanguageModel model, const RowDecoderSpec& spec) {
  if (!spec.use_kv_cache) return std::make_unique<RecomputeDecoder>(std::move(model), spec);
  if (model->config().hidden_streams > 1) return std::make_unique<SharedCacheDecoder>(std::move(model), spec);
  const bool graph = spec.decode == DecodeMode::cuda_graph ||
                     (spec.decode == DecodeMode::automatic && model->parameters().front().device().is_cuda() &&
                      graph_decode_obstacle(model->config()).empty());
  return std::make_unique<PerRowCacheDecoder>(std::move(model), spec, graph);
}

}  // namespace inkstone
