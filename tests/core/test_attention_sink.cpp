// The off-by-one softmax (attention sink) of explicit_attention: against a float64 formula, against the
// formulation with an extra key of logit 0 and value 0, its gradients against autograd of the formula, and its
// behaviour on fully masked rows and large logits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/explicit_attention.h"

namespace inkstone {
namespace {

// P_j = exp(s_j) / (1 + Σ_i exp(s_i)), written directly (no shift: the test logits are small).
torch::Tensor off_by_one_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& allowed) {
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  const auto weights = scores.exp() * allowed.to(scores.scalar_type());
  return torch::matmul(weights / (1.0 + weights.sum(-1, /*keepdim=*/true)), v);
}

// The same attention as ordinary softmax attention over one more key, first in line, with k = 0 and v = 0, which
// every query may see.
torch::Tensor sink_key_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& allowed) {
  auto zero_slot = [](const torch::Tensor& x) { return torch::cat({torch::zeros_like(x.narrow(2, 0, 1)), x}, 2); };
  auto sink_visible = torch::ones({allowed.size(0), allowed.size(1), allowed.size(2), 1}, allowed.options());
  return explicit_attention(q, zero_slot(k), zero_slot(v), torch::cat({sink_visible, allowed}, -1), false);
}

struct Inputs {
  torch::Tensor q, k, v;
};

Inputs random_inputs(int64_t length, uint64_t seed) {
  torch::manual_seed(seed);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  return {torch::randn({2, 3, length, 8}, options), torch::randn({2, 3, length, 8}, options),
          torch::randn({2, 3, length, 8}, options)};
}

TEST(AttentionSink, EqualsTheFloat64FormulaCausalAndMasked) {
  const auto in = random_inputs(7, 1);
  const auto causal = torch::ones({7, 7}, torch::kBool).tril().view({1, 1, 7, 7});
  const auto sink = explicit_attention(in.q, in.k, in.v, c10::nullopt, /*is_causal=*/true, /*sink=*/true);
  EXPECT_LT((sink - off_by_one_reference(in.q, in.k, in.v, causal)).abs().max().item<double>(), 1e-13);

  const auto allowed = torch::rand({2, 1, 7, 7}).gt(0.3);
  const auto masked = explicit_attention(in.q, in.k, in.v, allowed, false, true);
  EXPECT_LT((masked - off_by_one_reference(in.q, in.k, in.v, allowed)).abs().max().item<double>(), 1e-13);

  // Not the ordinary softmax: the sink takes mass, so the outputs are smaller.
  const auto plain = explicit_attention(in.q, in.k, in.v, c10::nullopt, true, false);
  EXPECT_GT((plain - sink).abs().max().item<double>(), 1e-2);
}

TEST(AttentionSink, EqualsAnExtraKeyOfLogitZeroAndValueZero) {
  const auto in = random_inputs(6, 2);
  const auto causal = torch::ones({6, 6}, torch::kBool).tril().view({1, 1, 6, 6});
  const auto sink = explicit_attention(in.q, in.k, in.v, c10::nullopt, true, true);
  EXPECT_LT((sink - sink_key_attention(in.q, in.k, in.v, causal)).abs().max().item<double>(), 1e-13);
}

TEST(AttentionSink, GradientsEqualAutogradOfTheFormula) {
  const auto in = random_inputs(5, 3);
  const auto causal = torch::ones({5, 5}, torch::kBool).tril().view({1, 1, 5, 5});
  const auto upstream = torch::randn({2, 3, 5, 8}, torch::kDouble);
  auto grads_of = [&](bool fused) {
    auto q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(), v = in.v.clone().requires_grad_();
    const auto out =
        fused ? explicit_attention(q, k, v, c10::nullopt, true, true) : off_by_one_reference(q, k, v, causal);
    (out * upstream).sum().backward();
    return std::vector<torch::Tensor>{q.grad(), k.grad(), v.grad()};
  };
  const auto ours = grads_of(true), formula = grads_of(false);
  for (size_t i = 0; i < 3; ++i) EXPECT_LT((ours[i] - formula[i]).abs().max().item<double>(), 1e-12) << i;
}

TEST(AttentionSink, AFullyMaskedRowGivesZeroAndLargeLogitsStayFinite) {
  auto in = random_inputs(4, 4);
  auto allowed = torch::ones({1, 1, 4, 4}, torch::kBool);
  allowed.index_put_({0, 0, 2}, false);  // query 2 may see no key: everything goes to the sink
  const auto out = explicit_attention(in.q, in.k, in.v, allowed, false, true);
  EXPECT_EQ(out.select(2, 2).abs().max().item<double>(), 0.0);
  EXPECT_FALSE(out.isnan().any().item<bool>());

  // Logits near 800 overflow exp in float64 unless shifted; the result is then the ordinary softmax's to
  // within e^-800 (the sink's share).
  const auto big_q = in.q * 400.0 / in.q.norm(2, -1, true), big_k = in.q * 16.0 / in.q.norm(2, -1, true);
  const auto sink = explicit_attention(big_q.to(torch::kFloat), big_k.to(torch::kFloat), in.v.to(torch::kFloat),
                                       c10::nullopt, true, true);
  const auto plain = explicit_attention(big_q.to(torch::kFloat), big_k.to(torch::kFloat), in.v.to(torch::kFloat),
                                        c10::nullopt, true, false);
  EXPECT_TRUE(sink.isfinite().all().item<bool>());
  EXPECT_LT((sink - plain).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace inkstone
