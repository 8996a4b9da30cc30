// Attention within packed documents without a [T, T] mask (docs/backbones.md, "Packed documents"): the documents
// of a batch are gathered into buckets of sequences of equal padded length, each bucket attended with plain
// causal or bidirectional SDPA (the fused kernels of libtorch 2.x), and the outputs put back in token order.
// Memory stays linear in T; a bucket's length is the next power of two of its documents' lengths (capped at T), so
// padding at most doubles the work and there are about log₂T buckets.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace inkstone {

struct DocumentBucket {
  int64_t length = 0;      // L: every document here has at most L tokens
  torch::Tensor gather;    // [n, L] int64: the token (b·T + t) at each slot; padding slots repeat a real token
  torch::Tensor real;      // [n, L] bool: the slot holds its document's token
  torch::Tensor real_slots;  // [m] int64: the real slots of the flattened [n·L], in bucket order
};

struct DocumentBuckets {
  int64_t rows = 0, length = 0;  // B, T
  std::vector<DocumentBucket> buckets;
  torch::Tensor token_order;  // [B·T] int64: where each token's output sits among the buckets' real slots
};

// documents: [B, T] int64, the packed-document index of every token, each document one contiguous run of its row
// (core/batch.h, packed_documents). Reads it on the host once; the tensors are made on `device`.
DocumentBuckets document_buckets(const torch::Tensor& documents, const torch::Device& device);

// q [B, H, T, D], k and v [B, H_kv, T, D] -> [B, H, T, D]: each token attends to the tokens of its own document
// (causal: the earlier ones and itself), with the sink when asked, through compat::sdpa per bucket.
torch::Tensor attend_within_documents(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const DocumentBuckets& documents, bool causal, bool sink);

}  // namespace inkstone
