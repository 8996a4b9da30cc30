#include "models/attention_mask.h"

#include <torch/torch.h>

namespace inkstone {

AttentionMask make_attention_mask(MaskMode mode, int64_t query_start, int64_t num_queries, int64_t num_keys,
                                  const torch::Tensor& key_real, const torch::Device& device) {
  if (!key_real.defined()) {
    if (mode == MaskMode::bidirectional) return {};
    if (query_start == 0 && num_queries == num_keys) return {c10::nullopt, /*is_causal=*/true};
    if (query_start + num_queries == num_keys && num_queries == 1) return {};  // the newest token sees all
  }
  const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto query_slot = torch::arange(query_start, query_start + num_queries, i64).unsqueeze(1);  // [Tq, 1]
  const auto key_slot = torch::arange(num_keys, i64).unsqueeze(0);                                   // [1, Tk]
  const auto allowed = mode == MaskMode::causal ? key_slot <= query_slot
                                                : torch::ones({num_queries, num_keys}, i64.dtype(torch::kBool));
  return mask_with_padding(allowed, query_start, key_real);
}

AttentionMask mask_with_padding(const torch::Tensor& allowed, int64_t query_start, const torch::Tensor& key_real) {
  auto mask = allowed.unsqueeze(0);  // [1, Tq, Tk]
  if (key_real.defined()) {
    const auto i64 = torch::TensorOptions().dtype(torch::kLong).device(allowed.device());
    const auto query_slot = torch::arange(query_start, query_start + allowed.size(0), i64).unsqueeze(1);
    const auto key_slot = torch::arange(allowed.size(1), i64).unsqueeze(0);
    mask = (mask & key_real.unsqueeze(1)) | (key_slot == query_slot).unsqueeze(0);
  }
  return {mask.unsqueeze(1), false};
}

AttentionMask within_documents(const AttentionMask& mask, MaskMode mode, const torch::Tensor& documents) {
  const int64_t length = documents.size(1);
  auto allowed = mask.allowed ? *mask.allowed
                              : make_attention_mask(mode, 0, length, length, torch::ones_like(documents, torch::kBool),
                                                    documents.device())
                                    .allowed.value();
  const auto same_document = (documents.unsqueeze(2) == documents.unsqueeze(1)).unsqueeze(1);  // [B, 1, T, T]
  return {allowed & same_document, false};
}

torch::Tensor block_diffusion_rule(const torch::Tensor& query_block, const torch::Tensor& query_noisy,
                                   const torch::Tensor& key_block, const torch::Tensor& key_noisy) {
  const auto qb = query_block.unsqueeze(1), kb = key_block.unsqueeze(0);
  const auto q_noisy = query_noisy.unsqueeze(1), k_noisy = key_noisy.unsqueeze(0);
  const auto clean_key = torch::where(q_noisy, kb < qb, kb <= qb);
  return torch::where(k_noisy, q_noisy & (kb == qb), clean_key);
}

torch::Tensor block_diffusion_training_rule(int64_t length, int64_t block, const torch::Device& device) {
  const auto blocks = torch::floor_divide(torch::arange(length, torch::TensorOptions().dtype(torch::kLong)), block);
  const auto both = torch::cat({blocks, blocks});
  const auto noisy = torch::cat({torch::zeros({length}, torch::kBool), torch::ones({length}, torch::kBool)});
  return block_diffusion_rule(both, noisy, both, noisy).to(device);
}

}  // namespace inkstone
