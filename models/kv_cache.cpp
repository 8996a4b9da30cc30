#include "models/kv_cache.h"

#include <algorithm>

#include <torch/torch.h>

#include "core/host_copy.h"

namespace inkstone {

KVCache::KVCache(int64_t num_layers, int64_t batch_size, int64_t capacity, std::optional<torch::ScalarType> storage)
    : batch_size_(batch_size),
      capacity_(capacity),
      rows_(batch_size),
      storage_(storage),
      read_limit_(capacity),
      keys_(num_layers),
      values_(num_layers),
      conv_states_(num_layers) {}

torch::Tensor KVCache::record_key_real(const torch::Tensor& key_padding, int64_t num_new) {
  TORCH_CHECK(length_ + num_new <= capacity_, "KV cache full: ", length_, " + ", num_new, " > ", capacity_);
  const int64_t end = length_ + num_new;
  if (key_padding.defined() && !key_real_.defined()) {
    key_real_ = torch::ones({batch_size_, capacity_}, key_padding.options().dtype(torch::kBool));
  }
  if (!key_real_.defined()) return {};
  auto fresh = key_real_.slice(1, length_, end);
  if (key_padding.defined()) {
    fresh.copy_(key_padding);
  } else {
    fresh.fill_(true);
  }
  return key_real_.slice(1, 0, end);
}

std::pair<torch::Tensor, torch::Tensor> KVCache::append(int64_t layer, const torch::Tensor& k,
                                                        const torch::Tensor& v) {
  auto& keys = keys_.at(layer);
  auto& values = values_.at(layer);
  if (!keys.defined()) {
    // Zeros, not empty: a fixed-window step reads every slot, masked ones too, and a masked slot holding NaN
    // garbage would turn its zero attention weight into NaN (0 · NaN).
    const auto options = k.options().dtype(storage_.value_or(k.scalar_type()));
    keys = torch::zeros({batch_size_, k.size(1), capacity_, k.size(3)}, options);
    values = torch::zeros({batch_size_, v.size(1), capacity_, v.size(3)}, options);
  }
  const int64_t end = length_ + k.size(2);
  keys.slice(2, length_, end).copy_(k);
  values.slice(2, length_, end).copy_(v);
  return {keys.slice(2, 0, end), values.slice(2, 0, end)};
}

namespace {

// A prefill's buffer `theirs` as this cache holds it, zeroed: `batch` rows and, along `slot_dim` (none: −1),
// `capacity` slots.
torch::Tensor zeros_like_rows(const torch::Tensor& theirs, int64_t batch, int64_t capacity, int64_t slot_dim) {
  auto shape = theirs.sizes().vec();
  shape[0] = batch;
  if (slot_dim >= 0) shape[slot_dim] = capacity;
  return torch::zeros(shape, theirs.options());
}

// [rows] slots from a [rows] or [1] tensor.
torch::Tensor per_row(const torch::Tensor& slots, int64_t rows) {
  TORCH_CHECK(slots.dim() == 1 && (slots.size(0) == rows || slots.size(0) == 1), "per-row decoding takes [", rows,
              "] or [1] slots, got ", slots.sizes());
  return slots.expand({rows});
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> KVCache::append_at(int64_t layer, const torch::Tensor& slots,
                                                           const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(keys_.at(layer).defined(), "per-row decoding continues a cache that a prefill has started");
  TORCH_CHECK(k.size(0) == rows_ && k.size(2) == 1, "per-row decoding appends one token to each of ", rows_,
              " rows, got ", k.sizes());
  auto keys = keys_[layer].narrow(0, 0, rows_);
  auto values = values_[layer].narrow(0, 0, rows_);
  const auto index = per_row(slots, rows_).view({rows_, 1, 1, 1}).expand({rows_, k.size(1), 1, k.size(3)});
  keys.scatter_(2, index, k.to(keys.scalar_type()));
  values.scatter_(2, index, v.to(values.scalar_type()));
  return {keys.narrow(2, 0, read_limit_), values.narrow(2, 0, read_limit_)};
}

torch::Tensor KVCache::window_key_real(const torch::Tensor& slots) {
  if (!slot_index_.defined() || slot_index_.device() != slots.device())
    slot_index_ = torch::arange(capacity_, slots.options());
  const auto real = slot_index_.narrow(0, 0, read_limit_).unsqueeze(0) <= per_row(slots, rows_).unsqueeze(1);
  return key_real_.defined() ? real & key_real_.narrow(0, 0, rows_).narrow(1, 0, read_limit_) : real;
}

void KVCache::limit_reads(int64_t limit) {
  TORCH_CHECK(limit >= 1 && limit <= capacity_, "a KV cache reads 1 to ", capacity_, " slots, not ", limit);
  read_limit_ = limit;
}

void KVCache::use_rows(int64_t rows) {
  TORCH_CHECK(rows >= 1 && rows <= batch_size_, "a KV cache of ", batch_size_, " rows cannot use ", rows);
  rows_ = rows;
}

void KVCache::gather_rows(const torch::Tensor& kept) {
  const int64_t n = kept.size(0);
  TORCH_CHECK(n <= batch_size_, "gather_rows: ", n, " rows of ", batch_size_);
  // index_select copies first, so rows moving onto each other read their old contents.
  for (auto* tensors : {&keys_, &values_, &conv_states_})
    for (auto& t : *tensors)
      if (t.defined()) t.narrow(0, 0, n).copy_(t.index_select(0, kept.to(t.device())));
  if (key_real_.defined()) key_real_.narrow(0, 0, n).copy_(key_real_.index_select(0, kept.to(key_real_.device())));
}

void KVCache::adopt_rows(const torch::Tensor& targets, const KVCache& prefill, const torch::Tensor& sources) {
  const int64_t length = prefill.length();
  TORCH_CHECK(length <= capacity_, "adopt_rows: a prefill of ", length, " slots into a cache of ", capacity_);
  const auto adopt = [&](torch::Tensor& mine, const torch::Tensor& theirs, int64_t slot_dim) {
    if (!theirs.defined()) return;
    if (!mine.defined()) mine = zeros_like_rows(theirs, batch_size_, capacity_, slot_dim);
    // In place on the buffers (a captured graph keeps their addresses): the prefilled slots of the target rows.
    const auto prefilled = [&](const torch::Tensor& t) { return slot_dim < 0 ? t : t.narrow(slot_dim, 0, length); };
    prefilled(mine).index_copy_(0, targets.to(mine.device()),
                                prefilled(theirs.index_select(0, sources.to(theirs.device()))));
  };
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    adopt(keys_[layer], prefill.keys_.at(layer), 2);
    adopt(values_[layer], prefill.values_.at(layer), 2);
    adopt(conv_states_[layer], prefill.conv_states_.at(layer), -1);
  }
  if (prefill.key_real_.defined() || key_real_.defined()) {
    if (!key_real_.defined()) key_real_ = torch::ones({batch_size_, capacity_}, targets.options().dtype(torch::kBool));
    auto prefilled = key_real_.narrow(1, 0, length);
    if (prefill.key_real_.defined()) {
      const auto real = prefill.key_real_.index_select(0, sources.to(targets.device()));
      prefilled.index_copy_(0, targets, real.narrow(1, 0, length));
    } else {
      prefilled.index_fill_(0, targets, true);
    }
    key_real_.narrow(1, length, capacity_ - length).index_fill_(0, targets, true);  // the tokens decoded next are real
  }
}

void KVCache::adopt_segments(const torch::Tensor& targets, const KVCache& prefill, const std::vector<int64_t>& starts,
                             const std::vector<int64_t>& lengths) {
  TORCH_CHECK(prefill.batch_size_ == 1 && !prefill.key_real_.defined(),
              "adopt_segments: the prefill must be one row without padding");
  TORCH_CHECK(starts.size() == lengths.size() && static_cast<int64_t>(starts.size()) == targets.size(0),
              "adopt_segments: one start and length per target row");
  for (const auto& state : prefill.conv_states_)
    TORCH_CHECK(!state.defined(), "adopt_segments: a convolution's state cannot be split between prompts");
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  TORCH_CHECK(longest <= capacity_, "adopt_segments: a prompt of ", longest, " slots into a cache of ", capacity_);
  // [n, longest]: the prefill slot each target slot reads (past a prompt's end, the last slot: never read).
  const auto slots = to_device_async(
      (torch::tensor(starts, torch::kLong).unsqueeze(1) + torch::arange(longest, torch::kLong))
          .clamp_max(prefill.length_ - 1)
          .flatten(),
      targets.device());
  const auto adopt = [&](torch::Tensor& mine, const torch::Tensor& theirs) {
    if (!theirs.defined()) return;
    if (!mine.defined()) mine = zeros_like_rows(theirs, batch_size_, capacity_, 2);
    // theirs [1, n_kv, S, h_d] -> [n, n_kv, longest, h_d], written in place (a captured graph keeps the buffers).
    const auto stretches = theirs[0].index_select(1, slots);
    mine.narrow(2, 0, longest)
        .index_copy_(0, targets.to(mine.device()),
                     stretches.view({theirs.size(1), -1, longest, theirs.size(3)}).transpose(0, 1));
  };
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    adopt(keys_[layer], prefill.keys_.at(layer));
    adopt(values_[layer], prefill.values_.at(layer));
  }
  if (key_real_.defined()) key_real_.index_fill_(0, targets, true);  // earlier prompts' padding record goes
}

torch::Tensor KVCache::conv_window(int64_t layer, const torch::Tensor& x, int64_t history) {
  auto& state = conv_states_.at(layer);
  if (!state.defined()) state = torch::zeros({batch_size_, history, x.size(2)}, x.options());
  auto rows = state.narrow(0, 0, x.size(0));
  auto window = torch::cat({rows, x}, 1);
  rows.copy_(window.slice(1, window.size(1) - history).detach());
  return window;
}

int64_t KVCache::state_numel(int64_t layer) const {
  int64_t numel = 0;
  for (const auto* tensors : {&keys_, &values_, &conv_states_})
    if (tensors->at(layer).defined()) numel += tensors->at(layer).numel();
  return numel;
}

void KVCache::advance(int64_t num_new) { length_ += num_new; }

void KVCache::rewind(int64_t length) {
  TORCH_CHECK(length >= 0 && length <= length_, "a KV cache rewinds to a length it has");
  for (const auto& state : conv_states_)
    TORCH_CHECK(!state.defined(), "a convolution's KV-cache window cannot be wound back");
  length_ = length;
}

}  // namespace inkstone
