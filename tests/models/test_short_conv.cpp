// Gated short-conv blocks and the layer patterns (docs/backbones.md, "Gated short convolution" and
// "Layer patterns"), and incremental decoding of every conv variant (short conv, QKV conv, MoE feed-forward) against
// the full forward.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/config.h"
#include "models/block.h"
#include "models/block_registry.h"
#include "models/depthwise_conv.h"
#include "models/language_model.h"
#include "models/layer_pattern.h"
#include "models/short_conv.h"
#include "tests/fixtures.h"
#include "tests/models/decode_fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

ModelConfig conv_config(const std::string& mixers = "CA") {
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.mixer_pattern = mixers;
  return c;
}

AttentionContext context_of(MaskMode mode) {
  AttentionContext context;
  context.mode = mode;
  return context;
}

// y_t = C_t ⊙ Σ_i w_i ⊙ (B ⊙ x̃)_{t−(k−1)+i} written out token by token in float64.
torch::Tensor reference_short_conv(ShortConvImpl& op, const torch::Tensor& u64) {
  const auto bcx = torch::matmul(u64, op.in_proj->weight.to(torch::kDouble).t()).chunk(3, -1);
  const auto bx = bcx[0] * bcx[2];
  const auto w = op.conv_weight.to(torch::kDouble);
  const int64_t T = u64.size(1), k = w.size(1);
  auto y = torch::zeros_like(bx);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < k; ++i) {
      const int64_t source = t - (k - 1) + i;
      if (source >= 0) y.select(1, t) += w.select(1, i) * bx.select(1, source);
    }
  return torch::matmul(bcx[1] * y, op.out_proj->weight.to(torch::kDouble).t());
}

TEST(ShortConv, MatchesFloat64TokenLoop) {
  torch::manual_seed(1);
  ShortConv op(conv_config(), 0);
  op->to(torch::kDouble);
  const auto u = torch::randn({2, 9, 32}, torch::kDouble);
  EXPECT_LT(max_abs_diff(op(u, context_of(MaskMode::causal)), reference_short_conv(*op, u)), 1e-12);
}

// Test 1: a perturbation at t reaches the causal output at t..t+2 only, the centred one at t−1..t+1.
TEST(ShortConv, PerturbationReachesOnlyTheKernelWindow) {
  torch::manual_seed(2);
  ShortConv op(conv_config(), 0);
  op->to(torch::kDouble);
  const auto u = torch::randn({1, 10, 32}, torch::kDouble);
  auto perturbed = u.clone();
  perturbed[0][4] += 1.0;
  const std::vector<std::tuple<MaskMode, int64_t, int64_t>> windows = {{MaskMode::causal, 4, 6},
                                                                        {MaskMode::bidirectional, 3, 5}};
  for (const auto& [mode, first, last] : windows) {
    const auto changed = (op(perturbed, context_of(mode)) - op(u, context_of(mode))).abs().amax(-1)[0];
    for (int64_t t = 0; t < 10; ++t) {
      if (t >= first && t <= last)
        EXPECT_GT(changed[t].item<double>(), 1e-9) << "t " << t;
      else
        EXPECT_EQ(changed[t].item<double>(), 0.0) << "t " << t;
    }
  }
}

// Test 3: the current tap alone (kernel [0, 0, 1]) is the identity, so with unit gates the operator is W_out x.
TEST(ShortConv, CurrentTapAloneIsTheIdentity) {
  const auto x = torch::randn({2, 6, 5}, torch::kDouble);
  auto w = torch::zeros({5, 3}, torch::kDouble);
  w.select(1, 2).fill_(1.0);
  EXPECT_TRUE(torch::equal(depthwise_conv_over_time(x, w, 0, context_of(MaskMode::causal)), x));
  auto centred = torch::zeros({5, 3}, torch::kDouble);
  centred.select(1, 1).fill_(1.0);
  EXPECT_TRUE(torch::equal(depthwise_conv_over_time(x, centred, 0, context_of(MaskMode::bidirectional)), x));
}

TEST(ShortConv, PaddingTokensCarryNothingIntoRealOnes) {
  const auto x = torch::randn({1, 6, 4}, torch::kDouble);
  const auto w = torch::randn({4, 3}, torch::kDouble);
  auto context = context_of(MaskMode::causal);
  context.token_real = torch::tensor({{false, false, true, true, true, true}});
  auto other = x.clone();
  other.narrow(1, 0, 2).normal_();
  EXPECT_TRUE(torch::equal(depthwise_conv_over_time(x, w, 0, context).narrow(1, 2, 4),
                           depthwise_conv_over_time(other, w, 0, context).narrow(1, 2, 4)));
}

// Test 4: "CCA" over 18 layers gives attention at 2, 5, ..., 17 and conv elsewhere; the parameter count follows
// the formula (conv operator 4d² + k·d, attention 2d·n_q·h_d + 2d·n_kv·h_d + 2h_d, SwiGLU 3·d·ffn, norms 2d).
TEST(ShortConv, EighteenBlockPatternAndParameterCount) {
  auto c = conv_config("CCA");
  c.n_layers = 18;
  int64_t attention = 0;
  for (int64_t i = 0; i < 18; ++i) {
    const bool is_attention = token_mixer_of(c, i).module_name == "attn";
    EXPECT_EQ(is_attention, i % 3 == 2) << "layer " << i;
    attention += is_attention;
  }
  EXPECT_EQ(attention, 6);
  auto model = build_language_model(c, 40);
  const int64_t d = 32, hd = 8, ffn = 128, k = 3, V = 40;
  const int64_t conv_block = 4 * d * d + k * d + 3 * d * ffn + 2 * d;
  const int64_t attention_block = d * 4 * hd * 2 + d * 2 * hd * 2 + 2 * hd + 3 * d * ffn + 2 * d;
  EXPECT_EQ(model->param_counts().total, V * d + 12 * conv_block + 6 * attention_block + d);
}

TEST(ShortConv, PatternErrorsNameTheKey) {
  const auto error = [](const std::string& line) {
    return testing::input_error_of(
        [&] { check_block_patterns(config_from_string("[model]\nn_layers = 4\n" + line, "zoo.toml").model); });
  };
  EXPECT_NE(error("mixer_pattern = \"AX\"").find("model.mixer_pattern"), std::string::npos);
  EXPECT_NE(error("mixer_pattern = \"CCA\"").find("must divide model.n_layers = 4"), std::string::npos);
  EXPECT_NE(error("ffn_pattern = \"DA\"").find("model.ffn_pattern"), std::string::npos);
  EXPECT_NE(error("ffn_pattern = \"DM\"\nmoe_experts = 2\nmoe_top_k = 3").find("model.moe_top_k"),
            std::string::npos);
  EXPECT_EQ(error("mixer_pattern = \"C A\"\nffn_pattern = \"M\""), "");
}

// Conv layers keep k−1 inputs per row whatever the context; attention layers hold keys and values.
TEST(ShortConv, DecodeStateOfConvLayersIsConstant) {
  torch::manual_seed(3);
  auto model = build_language_model(conv_config(), 37);
  model->eval();
  torch::NoGradGuard no_grad;
  auto cache = model->make_kv_cache(2, 40);
  model->extend_cache(torch::randint(0, 37, {2, 3}, torch::kLong), cache);
  const int64_t early = cache.state_numel(0);
  for (int i = 0; i < 30; ++i) model->extend_cache(torch::randint(0, 37, {2, 1}, torch::kLong), cache);
  EXPECT_EQ(cache.state_numel(0), early);
  EXPECT_EQ(early, 2 * 2 * 32);  // B · (k − 1) · d
}

// A bidirectional conv model is not causal: a later token changes earlier logits (diffusion sees both sides).
TEST(ShortConv, BidirectionalConvModelSeesTheFuture) {
  torch::manual_seed(4);
  auto model = build_language_model(conv_config("C"), 37);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {1, 8}, torch::kLong);
  auto changed = tokens.clone();
  changed[0][6] = (tokens[0][6].item<int64_t>() + 1) % 37;
  WindowInputs bidirectional;
  bidirectional.mask = MaskMode::bidirectional;
  EXPECT_GT(max_abs_diff(model(tokens, bidirectional)[0][5], model(changed, bidirectional)[0][5]), 0);
  EXPECT_EQ(max_abs_diff(model(tokens).narrow(1, 0, 6), model(changed).narrow(1, 0, 6)), 0.0);
}

// Time conditioning modulates conv blocks as it does attention blocks: identity at init, then the noise level
// changes the output.
TEST(ShortConv, TimeConditioningAppliesToConvBlocks) {
  torch::manual_seed(5);
  auto c = testing::tiny_model_config(0.2, /*time_conditioning=*/true);
  c.mixer_pattern = "C";
  Block block(c, 0);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({2, 6, 32});
  const auto cond = torch::randn({2, c.cond_dim});
  AttentionContext context = context_of(MaskMode::bidirectional);
  EXPECT_TRUE(torch::equal(block(x, context, cond), x));
  block->adaln->weight.normal_(0, 0.5);
  EXPECT_GT(max_abs_diff(block(x, context, cond), block(x, context, cond * 2)), 1e-4);
}

// ---- incremental decoding of every conv variant equals the full forward ----

struct DecodeCase {
  const char* name;
  std::function<void(ModelConfig&)> apply;
};

class ZooDecode : public ::testing::TestWithParam<DecodeCase> {};

ModelConfig decode_config(const DecodeCase& variant) {
  auto c = testing::tiny_model_config(0.2);
  c.n_layers = 3;
  variant.apply(c);
  return c;
}

// Prefill, a chunk, then one token per step: the conv decode state of docs/backbones.md, "Gated short convolution"
// and "QKV convolution".
TEST_P(ZooDecode, EqualsFullForward) {
  torch::manual_seed(6);
  auto model = build_language_model(decode_config(GetParam()), 37);
  model->eval();
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {2, 12}, torch::kLong);
  const auto full = model(tokens);
  auto cache = model->make_kv_cache(2, 12);
  EXPECT_LT(max_abs_diff(testing::decode_in_chunks(model, tokens, {5, 3, 1, 1, 1, 1}, cache), full), 1e-5);
}

// Left-padded prompts of lengths 2, 6, 4, then 3 decode steps: every row equals its own unpadded forward.
TEST_P(ZooDecode, LeftPaddedPromptsEqualEachRowAlone) {
  torch::manual_seed(7);
  auto model = build_language_model(decode_config(GetParam()), 37);
  model->eval();
  torch::NoGradGuard no_grad;
  testing::expect_left_padded_decode_equals_each_row_alone(model, {2, 6, 4}, /*steps=*/3, /*vocab=*/37);
}

// QKV conv taps are drawn (not zero) so that the decode state matters.
void random_qkv_conv(ModelConfig& c) {
  c.qkv_conv = true;
  c.qkv_conv_zero_init = false;
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, ZooDecode,
    ::testing::Values(DecodeCase{"short_conv_hybrid", [](ModelConfig& c) { c.mixer_pattern = "CCA"; }},
                      DecodeCase{"short_conv_kernel_4", [](ModelConfig& c) {
                                   c.mixer_pattern = "CA";
                                   c.n_layers = 2;
                                   c.conv_kernel = 4;
                                 }},
                      DecodeCase{"qkv_conv_before_norm", random_qkv_conv},
                      DecodeCase{"qkv_conv_after_norm", [](ModelConfig& c) {
                                   random_qkv_conv(c);
                                   c.qkv_conv_position = QkvConvPosition::after_norm;
                                 }},
                      DecodeCase{"hybrid_qkv_conv_moe", [](ModelConfig& c) {
                                   c.mixer_pattern = "CAC";
                                   random_qkv_conv(c);
                                   c.ffn_pattern = "DMD";
                                   c.moe_experts = 4;
                                   c.moe_shared_experts = 1;
                                 }}),
    [](const ::testing::TestParamInfo<DecodeCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace inkstone
