#include "models/kv_cache.h"

#include <torch/torch.h>

namespace inkstone {

KVCache::KVCache(int64_t num_layers, int64_t batch_size, int64_t capacity)
    : batch_size_(batch_size),
      capacity_(capacity),
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
    keys = torch::zeros({batch_size_, k.size(1), capacity_, k.size(3)}, k.options());
    values = torch::zeros({batch_size_, v.size(1), capacity_, v.size(3)}, v.options());
  }
  const int64_t end = length_ + k.size(2);
  keys.slice(2, length_, end).copy_(k);
  values.slice(2, length_, end).copy_(v);
  return {keys.slice(2, 0, end), values.slice(2, 0, end)};
}

std::pair<torch::Tensor, torch::Tensor> KVCache::append_at(int64_t layer, const torch::Tensor& slot,
                                                           const torch::Tensor& k, const torch::Tensor& v) {
  auto& keys = keys_.at(layer);
  auto& values = values_.at(layer);
  TORCH_CHECK(keys.defined(), "fixed-window decoding continues a cache that a prefill has started");
  TORCH_CHECK(k.size(2) == 1, "fixed-window decoding appends one token per row, got ", k.size(2));
  keys.index_copy_(2, slot, k);
  values.index_copy_(2, slot, v);
  return {keys, values};
}

torch::Tensor KVCache::window_key_real(const torch::Tensor& slot) {
  if (!slot_index_.defined() || slot_index_.device() != slot.device())
    slot_index_ = torch::arange(capacity_, slot.options());
  auto real = (slot_index_ <= slot).unsqueeze(0).expand({batch_size_, capacity_});
  return key_real_.defined() ? real & key_real_ : real;
}

torch::Tensor KVCache::conv_window(int64_t layer, const torch::Tensor& x, int64_t history) {
  auto& state = conv_states_.at(layer);
  if (!state.defined()) state = torch::zeros({x.size(0), history, x.size(2)}, x.options());
  auto window = torch::cat({state, x}, 1);
  state = window.slice(1, window.size(1) - history).detach().clone();
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
