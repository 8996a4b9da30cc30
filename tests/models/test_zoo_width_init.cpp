// ×-shaped variable width (docs/backbones.md, "x-shaped width") and γ-initialisation ("Gamma initialisation").
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/config.h"
#include "models/block.h"
#include "models/init.h"
#include "models/language_model.h"
#include "models/mlp.h"
#include "models/width_profile.h"
#include "tests/fixtures.h"
#include "tests/models/decode_fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

// An 8-layer, 128-wide model with an x-shaped profile down to ρ_b at layer 6, widths in multiples of 4 (fine
// enough for the parameter match at this size).
ModelConfig xwidth_config(double ratio = 0.5) {
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.d_model = 128;
  c.n_layers = 8;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.width_profile = WidthProfile::geometric;
  c.width_bottleneck_ratio = ratio;
  c.width_bottleneck_layer = 6;
  c.width_quantum = 4;
  return c;
}

torch::Tensor arange_state(int64_t width, double offset) {
  return torch::arange(width, torch::kDouble).view({1, 1, width}) + offset;
}

TEST(ZooWidth, UniformResizeIsTheIdentity) {
  const auto x = arange_state(8, 0);
  EXPECT_TRUE(resize_residual(x, 8, {arange_state(16, 100)}, true).is_same(x));
}

TEST(ZooWidth, ShrinkKeepsTheFirstCoordinates) {
  const auto out1 = arange_state(8, 0);
  EXPECT_TRUE(torch::equal(resize_residual(out1, 4, {}, true), out1.narrow(-1, 0, 4)));
}

// [8, 4, 8]: block-3 input = cat(out2[:4], out1[4:8]); [8, 4, 2, 8]: cat(out3[:2], out2[2:4], out1[4:8]).
TEST(ZooWidth, ExpandCarriesForwardFromTheNewestStateThatHasTheCoordinates) {
  const auto emb = arange_state(6, 1000), out1 = arange_state(8, 100), out2 = arange_state(4, 200),
             out3 = arange_state(2, 300);
  EXPECT_TRUE(torch::equal(resize_residual(out2, 8, {out1, emb}, true),
                           torch::cat({out2, out1.narrow(-1, 4, 4)}, -1)));
  EXPECT_TRUE(torch::equal(resize_residual(out3, 8, {out2, out1, emb}, true),
                           torch::cat({out3, out2.narrow(-1, 2, 2), out1.narrow(-1, 4, 4)}, -1)));
  // zero_pad ignores the earlier states
  EXPECT_TRUE(torch::equal(resize_residual(out2, 8, {out1, emb}, false),
                           torch::cat({out2, torch::zeros({1, 1, 4}, torch::kDouble)}, -1)));
}

// h = 4, w_1 = 8: nothing earlier has coordinates 4..7, so they are zero.
TEST(ZooWidth, ExpandZeroPadsWhatNoEarlierStateHas) {
  const auto emb = arange_state(4, 1);
  EXPECT_TRUE(torch::equal(resize_residual(emb, 8, {}, true),
                           torch::cat({emb, torch::zeros({1, 1, 4}, torch::kDouble)}, -1)));
}

TEST(ZooWidth, GeometricProfileFollowsTheFormula) {
  // b = 64, h = 64, ρ_b = 0.25, k = 3, L = 5: f = (16/64)^(1/2) = 0.5, u = (64/16)^(1/2) = 2.
  EXPECT_EQ(geometric_widths(64, 64, 0.25, 3, 5, 8), (std::vector<int64_t>{64, 32, 16, 32, 64}));
  // quantised to multiples of 32: 40 -> 32 (round), never below one quantum
  EXPECT_EQ(geometric_widths(40, 64, 0.1, 2, 2, 32), (std::vector<int64_t>{32, 32}));
}

// Every block kind: attention (with and without QKV conv) or short conv, dense or MoE (with a shared expert and
// its own expert width), with and without adaLN.
TEST(ZooWidth, BlockParameterFormulaMatchesTheBuiltBlock) {
  for (const bool conditioned : {false, true}) {
    auto c = testing::tiny_model_config(0.02, conditioned);
    c.n_layers = 4;
    c.mixer_pattern = "AACC";
    c.ffn_pattern = "DMDM";
    c.qkv_conv = true;
    c.moe_experts = 3;
    c.moe_shared_experts = 1;
    c.moe_expert_ffn_dim = 40;
    for (const int64_t w : {16, 32, 48}) {
      const auto layer = layer_config(c, w);
      for (int64_t i = 0; i < c.n_layers; ++i) {
        Block block(layer, i);
        int64_t built = 0;
        for (const auto& p : block->parameters()) built += p.numel();
        EXPECT_EQ(block_parameter_count(layer, i), built) << "width " << w << " layer " << i << " conditioned "
                                                          << conditioned;
      }
    }
  }
}

// Solved widths: the whole model within ±0.5 % of the uniform one, the narrowest layer ρ_b·h up to quantisation.
// One head and a quantum of 2: at 8 layers of width 128 a quantum of 4 moves the count in steps of ~1 %.
// The hybrid layout (short conv and MoE layers) is solved with its own block counts.
TEST(ZooWidth, SolvedWidthsMatchTheUniformParameterCount) {
  for (const auto& [ratio, hybrid] : std::vector<std::pair<double, bool>>{{0.3, false}, {0.5, false}, {0.75, false},
                                                                         {0.5, true}}) {
    auto c = xwidth_config(ratio);
    c.n_heads = 1;
    c.n_kv_heads = 1;
    c.width_quantum = 2;
    if (hybrid) {
      c.mixer_pattern = "CA";
      c.ffn_pattern = "DDDM";
      c.moe_experts = 4;
      c.moe_expert_ffn_dim = 32;
    }
    const auto widths = layer_widths(c);
    auto uniform = c;
    uniform.width_profile = WidthProfile::uniform;
    const double xcount = static_cast<double>(build_language_model(c, 11)->param_counts().total);
    const double ucount = static_cast<double>(build_language_model(uniform, 11)->param_counts().total);
    EXPECT_LT(std::abs(xcount / ucount - 1), 0.005) << "ratio " << ratio;
    EXPECT_LT(std::abs(width_parameter_mismatch(c, widths)), 0.005) << "ratio " << ratio;
    const int64_t narrowest = *std::min_element(widths.begin(), widths.end());
    EXPECT_LE(std::abs(static_cast<double>(narrowest) - ratio * 128), c.width_quantum / 2.0) << "ratio " << ratio;
    EXPECT_EQ(narrowest, widths[5]) << "ratio " << ratio;  // at layer k = 6
    EXPECT_EQ(widths.front(), widths.back()) << "ratio " << ratio;  // symmetric
  }
}

// ρ_b = 1 solves to d_model everywhere: the model is the uniform one, bit for bit.
TEST(ZooWidth, UniformProfileReproducesTheBaselineBitForBit) {
  const auto tokens = torch::randint(0, 11, {2, 7}, torch::kLong);
  auto c = xwidth_config(1.0);
  EXPECT_EQ(layer_widths(c), std::vector<int64_t>(8, 128));
  auto uniform = c;
  uniform.width_profile = WidthProfile::uniform;
  torch::manual_seed(11);
  auto x = build_language_model(c, 11);
  torch::manual_seed(11);
  auto base = build_language_model(uniform, 11);
  EXPECT_TRUE(torch::equal(x->forward(tokens), base->forward(tokens)));
}

TEST(ZooWidth, NarrowLayersGetLargerInitUnderFixedSigma) {
  auto c = xwidth_config(0.5);
  c.init_std = 0.02;
  c.d_model = 256;
  auto model = build_language_model(c, 11);
  const auto& widths = model->layer_widths();
  for (size_t i = 0; i < widths.size(); ++i) {
    const auto& w = std::dynamic_pointer_cast<SwiGLUImpl>(model->blocks[i]->as<BlockImpl>()->ffn)->up_proj->weight;
    const double expected = 0.02 * std::sqrt(256.0 / static_cast<double>(widths[i]));
    EXPECT_NEAR(w.std().item<double>() / expected, 1.0, 0.03) << "layer " << i << " width " << widths[i];
  }
}

TEST(ZooWidth, KVCacheDecodeEqualsFullForwardWithVaryingWidths) {
  torch::manual_seed(12);
  const auto tokens = torch::randint(0, 11, {2, 8}, torch::kLong);
  for (const char* expand : {"carry_forward", "zero_pad"}) {
    auto c = xwidth_config(0.5);
    c.width_expand = choice_named<WidthExpand>(expand).value();
    auto model = build_language_model(c, 11);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto full = model->forward(tokens);
    const auto decoded = testing::decode_in_pieces(model, tokens, 5);
    // fp32 rounding only (measured up to 4e-6 of the largest logit through 8 layers at init_std 0.2)
    EXPECT_LT(max_abs_diff(decoded, full), 2e-5 * full.abs().max().item<double>()) << expand;
  }
}

TEST(ZooWidth, VaryingWidthsTrainBidirectionalWithTimeConditioning) {
  auto c = xwidth_config(0.5);
  c.time_conditioning = true;
  c.tie_embeddings = false;
  auto model = build_language_model(c, 11);
  WindowInputs args;
  args.mask = MaskMode::bidirectional;
  args.noise_level = torch::rand({2});
  const auto hidden = model->hidden_states(torch::randint(0, 11, {2, 6}, torch::kLong), args);
  EXPECT_EQ(hidden.size(-1), 128);
  model->logits(hidden).sum().backward();
  for (const auto& p : model->parameters())
    if (p.grad().defined()) ASSERT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
}

TEST(ZooWidth, ConfigRejectsWidthProfilesThatCannotWork) {
  const auto error_of = [](const std::string& toml) {
    return testing::input_error_of([&] { config_from_string(toml, "test.toml"); });
  };
  EXPECT_NE(error_of("[model]\nwidth_profile = \"geometric\"\nresidual = \"mhar\"\n").find("residual = \"plain\""),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nwidth_profile = \"geometric\"\nhead_dim = 16\n").find("model.head_dim = 0"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nn_layers = 4\nwidth_profile = \"geometric\"\nwidth_bottleneck_layer = 5\n")
                .find("width_bottleneck_layer = 5"),
            std::string::npos);
  auto c = xwidth_config(0.5);
  c.width_quantum = 6;  // 3 coordinates per head: odd head dims
  EXPECT_NE(testing::input_error_of([&] { layer_widths(c); }).find("even head dim"), std::string::npos);
}

// ---- γ-initialisation ----

ModelConfig gamma_config(int64_t d_model, double gamma) {
  auto c = testing::tiny_model_config(0.02);
  c.d_model = d_model;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.init = "gamma";
  c.init_gamma = gamma;
  return c;
}

double empirical_std(const torch::Tensor& t) { return t.to(torch::kDouble).std().item<double>(); }

TEST(ZooGammaInit, EveryMatrixHasStdFanInToTheMinusGamma) {
  torch::manual_seed(13);
  auto model = build_language_model(gamma_config(256, 0.75), 300);
  for (const auto& [name, role] : model->param_roles()) {
    if (role == ParamRole::norm || role == ParamRole::zero) continue;
    const auto p = model->named_parameters()[name];
    const double expected = std::pow(static_cast<double>(p.size(1)), -0.75);
    EXPECT_NEAR(empirical_std(p) / expected, 1.0, 0.02) << name;
  }
}

TEST(ZooGammaInit, GammaOneHalfIsLeCunNormal) {
  InitScheme scheme = make_init_scheme(gamma_config(64, 0.5));
  torch::NoGradGuard no_grad;
  auto w = torch::empty({48, 80});
  torch::manual_seed(14);
  scheme("blocks.0.mlp.up_proj.weight", w, ParamRole::mlp);
  torch::manual_seed(14);
  const auto lecun = torch::empty({48, 80}).normal_(0.0, 1.0 / std::sqrt(80.0));
  EXPECT_TRUE(torch::equal(w, lecun));
}

TEST(ZooGammaInit, SigmaFollowsWidthAtFixedGammaButNotUnderFixedSigma) {
  torch::NoGradGuard no_grad;
  const auto std_of = [](const ModelConfig& c, int64_t fan_in) {
    auto w = torch::empty({512, fan_in});
    make_init_scheme(c)("w", w, ParamRole::qk);
    return empirical_std(w);
  };
  const auto gamma = gamma_config(64, 1.0);
  EXPECT_NEAR(std_of(gamma, 128) / std_of(gamma, 512), 4.0, 0.08);  // (512/128)^1
  auto fixed = gamma_config(64, 1.0);
  fixed.init = "normal";
  EXPECT_NEAR(std_of(fixed, 128) / std_of(fixed, 512), 1.0, 0.02);
  EXPECT_NEAR(std_of(fixed, 512), fixed.init_std, 0.02 * fixed.init_std);
}

// An override moves only its group: every other parameter is bitwise the same (the same random draws).
TEST(ZooGammaInit, GroupOverridesTouchOnlyTheirGroup) {
  const auto params_with = [](void (*set)(ModelConfig&)) {
    auto c = gamma_config(64, 1.0);
    set(c);
    torch::manual_seed(15);
    return build_language_model(c, 50);
  };
  auto base = params_with([](ModelConfig&) {});
  const std::vector<std::pair<void (*)(ModelConfig&), ParamRole>> overrides = {
      {[](ModelConfig& c) { c.init_gamma_embedding = 0.5; }, ParamRole::embedding},
      {[](ModelConfig& c) { c.init_gamma_attention = 0.5; }, ParamRole::qk},
      {[](ModelConfig& c) { c.init_gamma_mlp = 0.5; }, ParamRole::mlp},
  };
  for (const auto& [set, group] : overrides) {
    auto changed = params_with(set);
    for (const auto& [name, role] : base->param_roles()) {
      const bool in_group = role == group || (group == ParamRole::qk && role == ParamRole::vo);
      const auto before = base->named_parameters()[name], after = changed->named_parameters()[name];
      if (in_group) {
        const double fan_in = static_cast<double>(before.size(1));  // σ ratio fan_in^(−0.5) / fan_in^(−1)
        EXPECT_NEAR(empirical_std(after) / empirical_std(before), std::sqrt(fan_in), 1e-3 * std::sqrt(fan_in)) << name;
      } else {
        EXPECT_TRUE(torch::equal(before, after)) << name << " changed with the " << to_string(group) << " override";
      }
    }
  }
}

}  // namespace
}  // namespace inkstone
