#include "models/document_attention.h"

#include <algorithm>
#include <map>

#include <torch/torch.h>

#include "core/host_copy.h"
#include "core/torch_compat.h"

namespace inkstone {
namespace {

struct Span {
  int64_t row, start, length;
};

int64_t bucket_length(int64_t length, int64_t cap) {
  int64_t padded = 1;
  while (padded < length) padded *= 2;
  return std::min(padded, cap);
}

// [B·T, H, D] token rows of a [B, H, T, D] tensor.
torch::Tensor token_rows(const torch::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

// [n, H, L, D] from token rows gathered by a bucket's [n, L] slots.
torch::Tensor gathered(const torch::Tensor& rows, const DocumentBucket& bucket) {
  const auto n = bucket.gather.size(0);
  return rows.index_select(0, bucket.gather.reshape(-1))
      .view({n, bucket.length, rows.size(1), rows.size(2)})
      .transpose(1, 2);
}

}  // namespace

DocumentBuckets document_buckets(const torch::Tensor& documents, const torch::Device& device) {
  const auto docs = documents.to(torch::kCPU, torch::kLong).contiguous();
  TORCH_CHECK(docs.dim() == 2, "document_buckets: documents must be [B, T]");
  DocumentBuckets out;
  out.rows = docs.size(0);
  out.length = docs.size(1);
  const auto* d = docs.data_ptr<int64_t>();
  std::map<int64_t, std::vector<Span>> by_length;  // bucket length -> its documents
  for (int64_t b = 0; b < out.rows; ++b) {
    int64_t start = 0;
    for (int64_t t = 1; t <= out.length; ++t) {
      if (t < out.length && d[b * out.length + t] == d[b * out.length + t - 1]) continue;
      by_length[bucket_length(t - start, out.length)].push_back({b, start, t - start});
      start = t;
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(out.rows * out.length));
  int64_t next_real = 0;
  for (const auto& [length, spans] : by_length) {
    const auto n = static_cast<int64_t>(spans.size());
    auto gather = torch::empty({n, length}, torch::kLong);
    auto real = torch::zeros({n, length}, torch::kBool);
    std::vector<int64_t> real_slots;
    auto* g = gather.data_ptr<int64_t>();
    auto* r = real.data_ptr<bool>();
    for (int64_t i = 0; i < n; ++i) {
      const Span& s = spans[static_cast<size_t>(i)];
      for (int64_t j = 0; j < length; ++j) {
        const bool inside = j < s.length;
        const int64_t token = s.row * out.length + s.start + (inside ? j : s.length - 1);
        g[i * length + j] = token;
        r[i * length + j] = inside;
        if (inside) {
          real_slots.push_back(i * length + j);
          order[static_cast<size_t>(token)] = next_real++;
        }
      }
    }
    out.buckets.push_back({length, to_device_async(gather, device), to_device_async(real, device),
                           to_device_async(torch::tensor(real_slots, torch::kLong), device)});
  }
  out.token_order = to_device_async(torch::tensor(order, torch::kLong), device);
  return out;
}

torch::Tensor attend_within_documents(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const DocumentBuckets& documents, bool causal, bool sink) {
  TORCH_CHECK(q.size(0) == documents.rows && q.size(2) == documents.length,
              "attend_within_documents: q is not [B, H, T, D] of the documents' B and T");
  const auto q_rows = token_rows(q), k_rows = token_rows(k), v_rows = token_rows(v);
  std::vector<torch::Tensor> outputs;
  for (const auto& bucket : documents.buckets) {
    const auto n = bucket.gather.size(0);
    // Right padding: under the causal rule every real query already stops before it; bidirectional attention
    // masks the padded keys with a [n, 1, 1, L] row mask (broadcast over the queries, never [L, L]).
    c10::optional<torch::Tensor> key_mask;
    if (!causal) key_mask = bucket.real.view({n, 1, 1, bucket.length});
    const auto out = compat::sdpa(gathered(q_rows, bucket), gathered(k_rows, bucket), gathered(v_rows, bucket),
                                  key_mask, causal, sink);  // [n, H, L, D]
    outputs.push_back(token_rows(out).index_select(0, bucket.real_slots));
  }
  const auto rows = torch::cat(outputs).index_select(0, documents.token_order);  // [B·T, H, D]
  return rows.view({documents.rows, documents.length, q.size(1), q.size(3)}).transpose(1, 2);
}

}  // namespace inkstone
