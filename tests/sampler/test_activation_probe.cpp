// inkstone probe's statistics (docs/probe.md) against float64 formulas on fixed activations, the feed-forward tap
// the probe reads through, and the probe on a tiny model (causal prefixes, refusals).
#include <gtest/gtest.h>

#include <cmath>

#include "dataset/byte_tokenizer.h"
#include "models/mlp.h"
#include "sampler/activation_probe.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

TEST(ActivationProbe, InverseParticipationRatioOfKnownRows) {
  const auto a =
      torch::tensor({1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 3.0, 4.0, 0.0, 0.0, -2.0, 1.0, 0.5, 0.0}, torch::kDouble)
          .view({4, 4});
  const auto ipr = inverse_participation_ratio(a.to(torch::kFloat));
  ASSERT_EQ(ipr.scalar_type(), torch::kDouble);
  EXPECT_DOUBLE_EQ(ipr[0].item<double>(), 1.0);   // one active unit
  EXPECT_DOUBLE_EQ(ipr[1].item<double>(), 0.25);  // all four alike: 1/F
  EXPECT_NEAR(ipr[2].item<double>(), (81.0 + 256.0) / 625.0, 1e-15);
  // 16 + 1 + 1/16 over (4 + 1 + 1/4)^2, and the sign does not matter.
  EXPECT_NEAR(ipr[3].item<double>(), (16.0 + 1.0 + 0.0625) / (5.25 * 5.25), 1e-15);
}

TEST(ActivationProbe, SpectralEntropyIsOfTheSingularValues) {
  // Singular values 4 and 3: p = (16/25, 9/25).
  const auto a = torch::tensor({3.0, 0.0, 0.0, 0.0, 4.0, 0.0}, torch::kDouble).view({2, 3});
  const double expected = -(0.64 * std::log(0.64) + 0.36 * std::log(0.36));
  EXPECT_NEAR(spectral_entropy(a), expected, 1e-12);
  // Rotating the features keeps the singular values: the same entropy from entirely different entries.
  const auto q = std::get<0>(
      torch::linalg_qr(torch::tensor({1.0, 2.0, 0.5, -1.0, 0.3, 2.0, 0.7, -0.4, 1.1}, torch::kDouble).view({3, 3})));
  EXPECT_NEAR(spectral_entropy(torch::matmul(a, q)), expected, 1e-12);
  // Rank one: every row a multiple of one vector.
  const auto rank_one = torch::outer(torch::tensor({1.0, -2.0, 0.5}, torch::kDouble),
                                     torch::tensor({0.3, 1.0, -1.0, 2.0}, torch::kDouble));
  EXPECT_NEAR(spectral_entropy(rank_one), 0.0, 1e-12);
  // Orthogonal rows of equal norm: ln 3.
  EXPECT_NEAR(spectral_entropy(torch::eye(3, torch::kDouble) * 2.0), std::log(3.0), 1e-12);
}

TEST(ActivationProbe, SwiGLUHandsItsHiddenActivationsToTheTap) {
  torch::manual_seed(3);
  SwiGLU ffn(8, 12);
  const auto u = torch::randn({2, 5, 8});
  torch::Tensor seen;
  ffn->set_activation_tap([&seen](const torch::Tensor& a) { seen = a; });
  const auto out = ffn->forward(u);
  ASSERT_TRUE(seen.defined());
  const auto hidden = torch::silu(ffn->gate_proj(u)) * ffn->up_proj(u);
  EXPECT_LT(testing::max_abs_diff(seen, hidden), 1e-6);  // the fused gating rounds differently (kernels/swiglu.h)
  EXPECT_TRUE(out.equal(ffn->down_proj(seen)));
  ffn->set_activation_tap({});
  seen = torch::Tensor();
  ffn->forward(u);
  EXPECT_FALSE(seen.defined());
}

TEST(ActivationProbe, CausalPrefixesShareTheirActivationsAndBidirectionalOnesDoNot) {
  torch::manual_seed(5);
  auto model = build_language_model(testing::tiny_model_config(0.2), 260);
  const ByteTokenizer tokenizer;
  const std::vector<std::string> prompts = {"ab", "abcd"};
  const auto causal = probe_prompts(model, tokenizer, prompts, MaskMode::causal, torch::kCPU);
  ASSERT_EQ(causal.size(), 2u);
  EXPECT_EQ(causal[0].tokens, 2);
  EXPECT_EQ(causal[1].tokens, 4);
  ASSERT_EQ(causal[0].layers.size(), 2u);

  // Recompute the statistics from activations captured by a tap of our own.
  std::vector<torch::Tensor> captured(2);
  model->tap_feed_forward_activations([&](int64_t layer, const torch::Tensor& a) { captured[layer] = a; });
  {
    torch::NoGradGuard no_grad;
    WindowInputs args;
    model->forward(torch::tensor({{97, 98, 99, 100}}, torch::kLong), args);
  }
  model->tap_feed_forward_activations({});
  for (int64_t layer = 0; layer < 2; ++layer) {
    const auto a = captured[layer].squeeze(0);
    const auto& l = causal[1].layers[layer];
    EXPECT_EQ(l.width, a.size(1));
    EXPECT_NEAR(l.ipr_mean, inverse_participation_ratio(a).mean().item<double>(), 1e-12);
    EXPECT_NEAR(l.ipr_last, inverse_participation_ratio(a)[3].item<double>(), 1e-12);
    EXPECT_NEAR(l.spectral_entropy, spectral_entropy(a), 1e-12);
    EXPECT_NEAR(l.effective_rank, std::exp(spectral_entropy(a)), 1e-12);
    // Under the causal mask "ab" is the first two tokens of "abcd": its last token's activations are those of b.
    EXPECT_NEAR(causal[0].layers[layer].ipr_last, inverse_participation_ratio(a)[1].item<double>(), 1e-6);
    EXPECT_NEAR(causal[0].layers[layer].spectral_entropy, spectral_entropy(a.narrow(0, 0, 2)), 1e-5);
  }
  const auto both_ways = probe_prompts(model, tokenizer, prompts, MaskMode::bidirectional, torch::kCPU);
  EXPECT_GT(std::abs(both_ways[0].layers[1].ipr_last - causal[0].layers[1].ipr_last), 1e-6);
}

TEST(ActivationProbe, RefusesWhatItCannotRead) {
  auto model = build_language_model(testing::tiny_model_config(0.2), 260);
  const ByteTokenizer tokenizer;
  EXPECT_NE(testing::input_error_of([&] {
              probe_prompts(model, tokenizer, {std::string(65, 'a')}, MaskMode::causal, torch::kCPU);
            }).find("65 tokens, more than model.max_seq_len = 64"),
            std::string::npos);
  auto moe = testing::tiny_model_config(0.2);
  moe.ffn_pattern = "DM";
  moe.moe_experts = 4;
  moe.moe_top_k = 2;
  auto moe_model = build_language_model(moe, 260);
  EXPECT_NE(testing::input_error_of([&] {
              probe_prompts(moe_model, tokenizer, {"ab"}, MaskMode::causal, torch::kCPU);
            }).find("block 1's feed-forward"),
            std::string::npos);
  // The refusal leaves no tap behind: an ordinary forward still runs.
  EXPECT_NO_THROW(moe_model->forward(torch::tensor({{97, 98}}, torch::kLong)));
}

}  // namespace
}  // namespace inkstone
