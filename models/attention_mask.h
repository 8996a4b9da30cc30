// Which keys each query may attend to: built once per forward from the objective's mask mode and the padding,
// then shared by every layer.
#pragma once
#include <c10/util/Optional.h>
#include <torch/types.h>

namespace inkstone {

// Autoregressive objectives use causal attention; diffusion objectives see the whole sequence.
enum class MaskMode { causal, bidirectional };

struct AttentionMask {
  c10::optional<torch::Tensor> allowed;  // [B or 1, 1, Tq, Tk] bool, true = may attend; nullopt: no mask tensor
  bool is_causal = false;                // plain lower-triangular mask, left to SDPA's fused causal path
};

// The queries sit in key slots [query_start, query_start + num_queries) of num_keys slots (query_start > 0 when
// earlier slots come from a KV cache). key_real: [B, num_keys] bool, true = real token; undefined = all real.
// A query always sees its own slot, so a padding query never has an empty (NaN) softmax row.
AttentionMask make_attention_mask(MaskMode mode, int64_t query_start, int64_t num_queries, int64_t num_keys,
                                  const torch::Tensor& key_real, const torch::Device& device);

// The mask of any rule: allowed [Tq, Tk] bool (queries in key slots query_start..), less the padded keys, plus each
// query's own slot.
AttentionMask mask_with_padding(const torch::Tensor& allowed, int64_t query_start, const torch::Tensor& key_real);

// Block diffusion's rule (BD3-LM, Arriola et al. 2025) for tokens that are clean (x_0) or noisy (x_t) and belong to
// numbered blocks: a clean token sees the clean tokens of its block and of earlier ones; a noisy token sees the
// clean tokens of earlier blocks and the noisy tokens of its own. [Tq], [Tk] int64 blocks and bool noisy flags ->
// [Tq, Tk] bool.
torch::Tensor block_diffusion_rule(const torch::Tensor& query_block, const torch::Tensor& query_noisy,
                                   const torch::Tensor& key_block, const torch::Tensor& key_noisy);

// The training layout [x_0 | x_t] of windows of `length` tokens in blocks of `block`: [2L, 2L] on `device`.
torch::Tensor block_diffusion_training_rule(int64_t length, int64_t block, const torch::Device& device);

// `mask` (of a forward without a cache) restricted to query-key pairs of the same packed document: documents
// [B, T] int64 numbers the document of every token in its row.
AttentionMask within_documents(const AttentionMask& mask, MaskMode mode, const torch::Tensor& documents);

}  // namespace inkstone
