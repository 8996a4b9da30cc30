// The decode step of autoregressive sampling in a form a CUDA graph can replay. Small-batch decoding is bound by
// kernel launches (a 12-layer model launches a few hundred kernels to produce one token per row), so on CUDA the
// step's model forward is captured once and replayed (docs/kernels.md, "CUDA graphs for decoding").
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <torch/types.h>

#include "models/kv_cache.h"
#include "models/language_model.h"

namespace inkstone {

// Why the decode step of a model of this configuration cannot be captured, or "" when it can: the step must have
// no host-side values or allocations that change between steps, which holds for attention + dense SwiGLU blocks on
// a plain residual of one width (short convolutions re-create their state, MoE dispatch sizes its buffers from the
// routing, the fused routing kernel uploads a pointer table, width-varying and hidden-stream models build masks on
// the host).
std::string graph_decode_obstacle(const ModelConfig& config);

// One token per row against a KV cache's rows in use, each row at its own slot (KVCache::append_at): the inputs
// go into static buffers, and the model forward runs eagerly or, with a graph, is captured at the first step and
// replayed after. The eager form is the graph's twin, so the two give the same logits. A graph holds the cache's
// buffers and its rows: one decoder per batch bucket.
class FixedWindowDecoder {
 public:
  // The cache must hold a prefill already and use `rows` rows. use_graph needs a CUDA model and an empty
  // graph_decode_obstacle.
  FixedWindowDecoder(LanguageModel model, KVCache& cache, int64_t rows, bool use_graph);
  ~FixedWindowDecoder();
  FixedWindowDecoder(const FixedWindowDecoder&) = delete;
  FixedWindowDecoder& operator=(const FixedWindowDecoder&) = delete;

  // tokens, positions, slots: [rows] int64 on the model's device; row r writes its cache slot slots[r]. Returns
  // the next-token logits [rows, V] fp32, valid until the next step.
  torch::Tensor step(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& slots);

  bool graphed() const { return use_graph_; }

 private:
  torch::Tensor forward();

  LanguageModel model_;
  KVCache& cache_;
  bool use_graph_;
  torch::Tensor tokens_;     // [rows, 1] int64
  torch::Tensor positions_;  // [rows, 1] int64
  torch::Tensor slots_;      // [rows] int64
  torch::Tensor logits_;     // [rows, V] fp32: the captured forward's output
  struct CapturedGraph;
  std::unique_ptr<CapturedGraph> graph_;
};

}  // namespace inkstone
