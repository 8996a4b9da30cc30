// Scaled dot-product attention written as softmax(q kᵀ / √d + mask) v with its backward spelled out, used where
// libtorch's own SDPA is the composite "math" path (1.13). That path's softmax backward receives a strided
// gradient from matmul's backward and runs about 11x slower than on a contiguous one (5.4 ms vs 0.48 ms for
// [16, 6, 128, 128] on one core). The forward is the same sequence of ops, so the outputs are identical; the
// backward hands the softmax a contiguous gradient.
//
// With `sink`, the softmax is the off-by-one softmax (an attention sink; docs/backbones.md, "Attention sink"):
// P_j = exp(s_j) / (1 + Σ_i exp(s_i)), i.e. an extra key of logit 0 and value 0 that absorbs mass, so a query may
// attend to nothing. Its backward is the softmax's, dS = P ⊙ (dP − rowsum(dP ⊙ P)), because the sink's own
// dP is dO·0 = 0. A row with every key masked gives 0, not NaN.
#pragma once
#include <c10/util/Optional.h>
#include <torch/types.h>

namespace inkstone {

// q: [B, H, Tq, D], k, v: [B, H, Tk, D]; allowed: [B or 1, 1, Tq, Tk] bool (true = may attend) or none;
// is_causal: the lower-triangular mask (Tq == Tk), without a mask tensor.
torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const c10::optional<torch::Tensor>& allowed, bool is_causal, bool sink = false);

}  // namespace inkstone
