// compat::sdpa (libtorch 2.x: fused kernels, the sink as a zero key and value, grouped queries without repeated
// heads; 1.13: the explicit path) against the explicit path on repeated heads, in float64, forward and gradient,
// for causal and bidirectional attention, with and without the sink, packed-document masks and grouped queries;
// and on 2.x its memory, linear in T.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/explicit_attention.h"
#include "core/tensor_memory.h"
#include "core/torch_compat.h"
#include "models/attention_mask.h"
#include "models/document_attention.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

struct Case {
  bool causal, sink, documents;
  int64_t kv_heads;  // of 4 query heads
};

std::string describe(const Case& c) {
  return std::string(c.causal ? "causal" : "bidirectional") + (c.sink ? " + sink" : "") +
         (c.documents ? " + documents" : "") + ", " + std::to_string(c.kv_heads) + " KV heads";
}

TEST(FusedAttention, EqualsTheExplicitPathInFloat64ForwardAndGradient) {
  const int64_t batch = 2, heads = 4, length = 9, dim = 8;
  for (const bool causal : {true, false})
    for (const bool sink : {false, true})
      for (const bool documents : {false, true})
        for (const int64_t kv_heads : {4, 2, 1}) {
          const Case c{causal, sink, documents, kv_heads};
          SCOPED_TRACE(describe(c));
          torch::manual_seed(7);
          const auto options = torch::TensorOptions().dtype(torch::kDouble);
          const auto q = torch::randn({batch, heads, length, dim}, options).requires_grad_();
          const auto k = torch::randn({batch, kv_heads, length, dim}, options).requires_grad_();
          const auto v = torch::randn({batch, kv_heads, length, dim}, options).requires_grad_();
          const auto upstream = torch::randn({batch, heads, length, dim}, options);
          // Row 0: documents of 4 and 5 tokens; row 1: 2, 3 and 4 (the document index of every token).
          const auto doc_index = torch::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 2, 2, 2, 2}, torch::kLong)
                                     .view({batch, length});
          const auto mode = causal ? MaskMode::causal : MaskMode::bidirectional;
          AttentionMask mask = make_attention_mask(mode, 0, length, length, {}, torch::kCPU);
          if (documents) mask = within_documents(mask, mode, doc_index);

          const auto fused = compat::sdpa(q, k, v, mask.allowed, mask.is_causal, sink);
          const auto fused_grads = torch::autograd::grad({(fused * upstream).sum()}, {q, k, v});
          const auto reference = explicit_attention(q, compat::repeat_kv_heads(k, heads),
                                                    compat::repeat_kv_heads(v, heads), mask.allowed, mask.is_causal,
                                                    sink);
          const auto reference_grads = torch::autograd::grad({(reference * upstream).sum()}, {q, k, v});
          EXPECT_LT(max_abs_diff(fused, reference), 1e-12);
          for (size_t i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(fused_grads[i], reference_grads[i]), 1e-11) << i;
        }
}

// Rows of packed documents with lengths 1, 2, 3, 5, 8 and 13 (buckets 1, 2, 4, 8, 16) and one filling a row.
torch::Tensor document_index(int64_t length) {
  const std::vector<std::vector<int64_t>> lengths = {{1, 2, 13, 3, 5, 8}, {32}, {8, 8, 2, 13, 1}};
  std::vector<int64_t> index;
  for (const auto& row : lengths) {
    int64_t doc = 0, filled = 0;
    for (const int64_t n : row) {
      for (int64_t i = 0; i < n; ++i) index.push_back(doc);
      filled += n;
      ++doc;
    }
    EXPECT_EQ(filled, length);
  }
  return torch::tensor(index, torch::kLong).view({3, length});
}

TEST(DocumentAttention, EqualsTheExplicitPathWithADocumentMaskInFloat64) {
  const int64_t heads = 4, length = 32, dim = 8;
  const auto documents = document_index(length);
  const auto buckets = document_buckets(documents, torch::kCPU);
  EXPECT_EQ(buckets.buckets.size(), 6u);  // lengths 1, 2, 4, 8, 16 and 32
  for (const bool causal : {true, false})
    for (const bool sink : {false, true})
      for (const int64_t kv_heads : {4, 1}) {
        SCOPED_TRACE(describe({causal, sink, true, kv_heads}));
        torch::manual_seed(10);
        const auto options = torch::TensorOptions().dtype(torch::kDouble);
        const auto q = torch::randn({3, heads, length, dim}, options).requires_grad_();
        const auto k = torch::randn({3, kv_heads, length, dim}, options).requires_grad_();
        const auto v = torch::randn({3, kv_heads, length, dim}, options).requires_grad_();
        const auto upstream = torch::randn({3, heads, length, dim}, options);
        const auto mode = causal ? MaskMode::causal : MaskMode::bidirectional;
        const auto mask = within_documents(make_attention_mask(mode, 0, length, length, {}, torch::kCPU), mode,
                                           documents);
        const auto ours = attend_within_documents(q, k, v, buckets, causal, sink);
        const auto our_grads = torch::autograd::grad({(ours * upstream).sum()}, {q, k, v});
        const auto reference = explicit_attention(q, compat::repeat_kv_heads(k, heads),
                                                  compat::repeat_kv_heads(v, heads), mask.allowed, false, sink);
        const auto reference_grads = torch::autograd::grad({(reference * upstream).sum()}, {q, k, v});
        EXPECT_LT(max_abs_diff(ours, reference), 1e-12);
        for (size_t i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(our_grads[i], reference_grads[i]), 1e-11) << i;
      }
}

TEST(DocumentAttention, RefusesAShapeOtherThanItsDocuments) {
  const auto buckets = document_buckets(document_index(32), torch::kCPU);
  const auto q = torch::randn({3, 2, 16, 8});
  EXPECT_THROW(attend_within_documents(q, q, q, buckets, true, false), c10::Error);
}

TEST(FusedAttention, TheSinkTakesMassFromEveryQuery) {
  torch::manual_seed(8);
  const auto q = torch::randn({1, 2, 5, 8}, torch::kDouble), k = torch::randn({1, 2, 5, 8}, torch::kDouble);
  const auto v = torch::ones({1, 2, 5, 8}, torch::kDouble);
  // With every value 1 the output is each query's total weight on real keys: 1 without the sink, less with it.
  const auto plain = compat::sdpa(q, k, v, c10::nullopt, true, false);
  const auto sunk = compat::sdpa(q, k, v, c10::nullopt, true, true);
  EXPECT_LT(max_abs_diff(plain, torch::ones_like(plain)), 1e-12);
  EXPECT_LT(sunk.max().item<double>(), 1.0);
  EXPECT_GT(sunk.min().item<double>(), 0.0);
}

// Peak bytes of CPU tensors above the inputs for one forward and backward of causal sink attention with grouped
// queries, 8 heads, head dim 64; with `documents`, packed documents of 100 tokens (the last one shorter).
double attention_peak_mib(int64_t length, bool documents = false) {
  torch::manual_seed(9);
  const auto q = torch::randn({1, 8, length, 64}).requires_grad_();
  const auto k = torch::randn({1, 2, length, 64}).requires_grad_();
  const auto v = torch::randn({1, 2, length, 64}).requires_grad_();
  const auto upstream = torch::randn({1, 8, length, 64});
  const double before = cpu_tensor_live_mib();
  reset_cpu_tensor_peak();
  {
    const auto out =
        documents ? attend_within_documents(q, k, v,
                                            document_buckets(torch::arange(length).floor_divide(100).view({1, length}),
                                                             torch::kCPU),
                                            true, true)
                  : compat::sdpa(q, k, v, c10::nullopt, true, true);
    const auto grads = torch::autograd::grad({(out * upstream).sum()}, {q, k, v});
  }
  return cpu_tensor_peak_mib() - before;
}

TEST(FusedAttention, MemoryIsLinearInTheLengthWithTheSink) {
  if (!compat::kAttentionKeepsNoWeights) GTEST_SKIP() << "libtorch 1.13 keeps the explicit path (O(T²) weights)";
  count_cpu_tensor_memory();
  const double at_1024 = attention_peak_mib(1024), at_4096 = attention_peak_mib(4096);
  // Four times the tokens: about four times the memory (quadratic would be sixteen). The explicit path keeps the
  // 8 heads' 4096² float weights: 512 MiB.
  RecordProperty("peak_mib_at_1024", std::to_string(at_1024));
  RecordProperty("peak_mib_at_4096", std::to_string(at_4096));
  EXPECT_LT(at_4096 / at_1024, 6.0) << at_1024 << " MiB at T = 1,024, " << at_4096 << " MiB at T = 4,096";
  EXPECT_LT(at_4096, 128.0);
}

TEST(DocumentAttention, MemoryIsLinearInTheLength) {
  if (!compat::kAttentionKeepsNoWeights) GTEST_SKIP() << "libtorch 1.13 keeps the explicit path (O(T²) weights)";
  count_cpu_tensor_memory();
  const double at_1024 = attention_peak_mib(1024, true), at_4096 = attention_peak_mib(4096, true);
  RecordProperty("peak_mib_at_1024", std::to_string(at_1024));
  RecordProperty("peak_mib_at_4096", std::to_string(at_4096));
  EXPECT_LT(at_4096 / at_1024, 6.0) << at_1024 << " MiB at T = 1,024, " << at_4096 << " MiB at T = 4,096";
  EXPECT_LT(at_4096, 128.0);
}

}  // namespace
}  // namespace inkstone
