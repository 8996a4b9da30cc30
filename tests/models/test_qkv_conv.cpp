// QKV depthwise residual convolution (docs/backbones.md, "QKV convolution"); decoding with it is tested with the
// other conv variants in test_short_conv.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/language_model.h"
#include "models/qkv_conv.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

ModelConfig qkv_conv_config(const std::string& position = "before_norm") {
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.qkv_conv = true;
  c.qkv_conv_position = choice_named<QkvConvPosition>(position).value();
  return c;
}

AttentionContext qkv_context(MaskMode mode) {
  AttentionContext context;
  context.mode = mode;
  return context;
}

// Test 1: zero taps give exactly the base model, in either position and under either mask: bit for bit before the
// norm; after it the base model fuses the QK-norm with RoPE (models/kernels/qk_norm_rope.h) and the conv model
// cannot, so there to float32 rounding.
TEST(QkvConv, ZeroTapsGiveExactlyTheBaseModel) {
  torch::manual_seed(1);
  auto base = build_language_model(testing::tiny_model_config(0.2), 37);
  const auto tokens = torch::randint(0, 37, {2, 10}, torch::kLong);
  torch::NoGradGuard no_grad;
  for (const char* position : {"before_norm", "after_norm"}) {
    auto with_conv = build_language_model(qkv_conv_config(position), 37);
    auto weights = with_conv->named_parameters();
    for (const auto& item : base->named_parameters()) weights[item.key()].copy_(item.value());
    for (const auto& item : with_conv->named_parameters())
      if (item.key().find("qkv_conv") != std::string::npos) EXPECT_EQ(item.value().abs().max().item<double>(), 0);
    for (MaskMode mode : {MaskMode::causal, MaskMode::bidirectional}) {
      WindowInputs args;
      args.mask = mode;
      const auto conv_logits = with_conv(tokens, args), base_logits = base(tokens, args);
      if (std::string(position) == "before_norm")
        EXPECT_TRUE(torch::equal(conv_logits, base_logits)) << position;
      else
        EXPECT_LT(testing::max_abs_diff(conv_logits, base_logits), 1e-5) << position;
    }
  }
}

// c′_t = c_t + Σ_i W[:, i] ⊙ c_{t−2+i}, token by token in float64.
TEST(QkvConv, MatchesFloat64ResidualFormula) {
  torch::manual_seed(2);
  QkvConv conv(std::array<int64_t, 3>{8, 4, 4}, 3, 0);
  conv->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  conv->weight.normal_();
  const std::array<torch::Tensor, 3> qkv = {torch::randn({2, 7, 8}, torch::kDouble),
                                            torch::randn({2, 7, 4}, torch::kDouble),
                                            torch::randn({2, 7, 4}, torch::kDouble)};
  const auto out = conv(qkv, qkv_context(MaskMode::causal));
  const auto c = torch::cat({qkv[0], qkv[1], qkv[2]}, -1);
  auto expected = c.clone();
  for (int64_t t = 0; t < 7; ++t)
    for (int64_t i = 0; i < 3; ++i)
      if (t - 2 + i >= 0) expected.select(1, t) += conv->weight.select(1, i) * c.select(1, t - 2 + i);
  const auto got = torch::cat({out[0], out[1], out[2]}, -1);
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-12);
}

// Test 2: a perturbation of token t changes q, k and v at t..t+2 only, and only in the perturbed channels.
TEST(QkvConv, PerturbationReachesTokensTToTPlus2) {
  torch::manual_seed(3);
  QkvConv conv(std::array<int64_t, 3>{8, 4, 4}, 3, 0);
  torch::NoGradGuard no_grad;
  conv->weight.normal_();
  const std::array<torch::Tensor, 3> qkv = {torch::randn({1, 9, 8}), torch::randn({1, 9, 4}),
                                            torch::randn({1, 9, 4})};
  auto perturbed = qkv;
  for (auto& part : perturbed) {
    part = part.clone();
    part[0][3] += 1.0;
  }
  const auto a = conv(qkv, qkv_context(MaskMode::causal));
  const auto b = conv(perturbed, qkv_context(MaskMode::causal));
  for (int part = 0; part < 3; ++part) {
    const auto changed = (a[part] - b[part]).abs().amax(-1)[0];
    for (int64_t t = 0; t < 9; ++t) EXPECT_EQ(changed[t].item<float>() > 0, t >= 3 && t <= 5) << part << " " << t;
  }
  auto only_v = qkv;
  only_v[2] = only_v[2].clone();
  only_v[2][0][3] += 1.0;
  const auto c = conv(only_v, qkv_context(MaskMode::causal));
  EXPECT_TRUE(torch::equal(c[0], a[0]));
  EXPECT_TRUE(torch::equal(c[1], a[1]));
}

// 3·(n_q + 2 n_kv)·h_d taps per layer; drawn from U(±1/√k) unless zero-initialised.
TEST(QkvConv, ParameterCountAndInit) {
  auto c = qkv_conv_config();
  c.qkv_conv_zero_init = false;
  torch::manual_seed(4);
  auto model = build_language_model(c, 37);
  const auto base = build_language_model(testing::tiny_model_config(0.2), 37);
  EXPECT_EQ(model->param_counts().total - base->param_counts().total, 2 * 3 * (4 + 2 * 2) * 8);
  for (const auto& [name, role] : model->param_roles())
    if (name.find("qkv_conv") != std::string::npos) EXPECT_EQ(role, ParamRole::conv) << name;
  const auto taps = model->named_parameters()["blocks.0.attn.qkv_conv.weight"];
  EXPECT_GT(taps.abs().max().item<double>(), 0.1);
  EXPECT_LE(taps.abs().max().item<double>(), 1 / std::sqrt(3.0));
}

}  // namespace
}  // namespace inkstone
