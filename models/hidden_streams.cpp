#include "models/hidden_streams.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "models/block_registry.h"

namespace inkstone {

void warn_if_streams_never_cross(const ModelConfig& config) {
  if (config.hidden_streams == 1) return;
  const bool crosses = config.hidden_local_sees_token || config.hidden_attention.find('X') != std::string::npos ||
                       some_token_mixer(config, &TokenMixerKind::crosses_streams);
  if (!crosses)
    fmt::print(stderr, "warning: model.hidden_attention = \"{}\" has no cross-stream layer (X) and no token mixer "
               "that crosses streams: the last of the {} streams ignores the others\n",
               config.hidden_attention, config.hidden_streams);
}

StreamLayout::StreamLayout(const ModelConfig& config)
    : n_(config.hidden_streams),
      per_token_positions_(config.hidden_positions == HiddenPositions::per_token),
      local_sees_token_(config.hidden_local_sees_token) {}

torch::Tensor StreamLayout::interleave(const std::vector<torch::Tensor>& copies) const {
  TORCH_CHECK(static_cast<int64_t>(copies.size()) == n_, "expected ", n_, " stream copies, got ", copies.size());
  if (n_ == 1) return copies.front();
  const auto stacked = torch::stack(copies, 2);  // [B, T, n, d]: slot n·t + s is row (t, s)
  return stacked.flatten(1, 2);
}

torch::Tensor StreamLayout::last_stream(const torch::Tensor& slots) const {
  if (n_ == 1) return slots;
  return slots.unflatten(1, {slots.size(1) / n_, n_}).select(2, n_ - 1);
}

torch::Tensor StreamLayout::slot_positions(const torch::Tensor& token_positions) const {
  if (n_ == 1) return token_positions;
  auto per_slot = token_positions.unsqueeze(2).expand({-1, -1, n_});  // [B, T, n]
  if (!per_token_positions_) per_slot = per_slot * n_ + torch::arange(n_, token_positions.options());
  return per_slot.flatten(1, 2);
}

torch::Tensor StreamLayout::slot_flags(const torch::Tensor& token_flags) const {
  if (n_ == 1 || !token_flags.defined()) return token_flags;
  return token_flags.repeat_interleave(n_, 1);
}

AttentionMask StreamLayout::local_mask(MaskMode mode, int64_t query_start, int64_t num_queries, int64_t num_keys,
                                       const torch::Tensor& key_real, const torch::Device& device) const {
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto query_slot = torch::arange(query_start, query_start + num_queries, i64).unsqueeze(1);  // [Tq, 1]
  const auto key_slot = torch::arange(num_keys, i64).unsqueeze(0);                                   // [1, Tk]
  const auto query_token = query_slot.div(n_, "floor");
  const auto key_token = key_slot.div(n_, "floor");
  const bool causal = mode == MaskMode::causal;
  auto allowed = query_slot.remainder(n_) == key_slot.remainder(n_);
  if (causal) allowed = allowed & (key_token <= query_token);
  if (local_sees_token_) {
    auto own_token = key_token == query_token;
    if (causal) own_token = own_token & (key_slot <= query_slot);
    allowed = allowed | own_token;
  }
  return mask_with_padding(allowed, query_start, key_real);
}

}  // namespace inkstone
