// What every token-mixing layer (attention, short conv) of one forward shares, built once by the language model.
#pragma once
#include <torch/types.h>

#include <memory>

#include "models/attention_mask.h"
#include "models/document_attention.h"
#include "models/kv_cache.h"
#include "models/rope.h"

namespace inkstone {

struct AttentionContext {
  RopeTable rope;
  AttentionMask mask;
  KVCache* cache = nullptr;           // null: no incremental decoding
  torch::Tensor write_slot;           // [rows] or [1] int64: per-row decoding into these cache slots (KVCache::append_at)
  MaskMode mode = MaskMode::causal;   // convolutions over time are causal, or centred when bidirectional
  torch::Tensor token_real;           // [B, T] bool, this call's real tokens; undefined: all real
  torch::Tensor documents;            // [B, T] int64 packed-document index; undefined: one document per row
  // Attention within those documents by buckets, `mask` then without them (models/document_attention.h); null:
  // `mask` holds the documents' rule.
  std::shared_ptr<const DocumentBuckets> document_buckets;
};

}  // namespace inkstone
