// Mixture-of-experts feed-forward (docs/backbones.md, "Mixture of experts") against a per-token float64 loop.
#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/auxiliary.h"
#include "models/language_model.h"
#include "models/moe.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

ModelConfig moe_config(const std::string& router = "softmax") {
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.ffn_pattern = "M";
  c.moe_experts = 4;
  c.moe_top_k = 2;
  c.moe_expert_ffn_dim = 16;
  c.moe_router = choice_named<MoeRouter>(router).value();
  return c;
}

torch::Tensor swiglu64(SwiGLUImpl& ffn, const torch::Tensor& x) {
  const auto w = [](const torch::nn::Linear& l) { return l->weight.to(torch::kDouble); };
  return torch::mv(w(ffn.down_proj), torch::silu(torch::mv(w(ffn.gate_proj), x)) * torch::mv(w(ffn.up_proj), x));
}

// One token at a time: scores, top-k of score + bias, weights normalised over the chosen and scaled, then
// Σ shared + Σ w_j FFN_j(x).
torch::Tensor per_token_reference(MoEImpl& moe, const ModelConfig& c, const torch::Tensor& x64) {
  auto out = torch::zeros_like(x64);
  const auto bias = moe.selection_bias.to(torch::kDouble);
  for (int64_t n = 0; n < x64.size(0); ++n) {
    const auto x = x64[n];
    const auto logits = torch::mv(moe.router->weight.to(torch::kDouble), x);
    const auto scores = c.moe_router == MoeRouter::sigmoid ? logits.sigmoid() : logits.softmax(0);
    std::vector<int64_t> order(c.moe_experts);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return (scores[a] + bias[a]).item<double>() > (scores[b] + bias[b]).item<double>();
    });
    double total = 0;
    for (int64_t j = 0; j < c.moe_top_k; ++j) total += scores[order[j]].item<double>();
    for (int64_t j = 0; j < c.moe_top_k; ++j) {
      const double w = scores[order[j]].item<double>() / total * c.moe_route_scale;
      out[n] += w * swiglu64(*moe.experts[order[j]]->as<SwiGLUImpl>(), x);
    }
    if (!moe.shared.is_empty()) out[n] += swiglu64(*moe.shared, x);
  }
  return out;
}

struct RouterCase {
  const char* name;
  std::string router;
  double route_scale;
  int64_t shared;
};

class MoEVsLoop : public ::testing::TestWithParam<RouterCase> {};

// Test 4: with no capacity limit the batched dispatch equals the per-token loop.
TEST_P(MoEVsLoop, MatchesPerTokenFloat64Loop) {
  torch::manual_seed(1);
  auto c = moe_config(GetParam().router);
  c.moe_route_scale = GetParam().route_scale;
  c.moe_shared_experts = GetParam().shared;
  MoE moe(c, 0);
  moe->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  for (auto& p : moe->parameters()) p.normal_(0, 0.3);
  moe->selection_bias.copy_(torch::tensor({0.0, 0.05, -0.05, 0.1}));
  const auto u = torch::randn({2, 7, 32}, torch::kDouble);
  const auto got = moe(u).reshape({-1, 32});
  const auto expected = per_token_reference(*moe, c, u.reshape({-1, 32}));
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Moe, MoEVsLoop,
                         ::testing::Values(RouterCase{"softmax", "softmax", 1.0, 0},
                                           RouterCase{"softmax_shared", "softmax", 1.0, 2},
                                           RouterCase{"sigmoid_scaled_shared", "sigmoid", 2.5, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

// Test 1: routing weights sum to 1, or to route_scale on the sigmoid path.
TEST(Moe, RoutingWeightsSumToRouteScale) {
  torch::manual_seed(2);
  const std::vector<std::pair<std::string, double>> cases = {{"softmax", 1.0}, {"sigmoid", 2.5}};
  for (const auto& [router, scale] : cases) {
    auto c = moe_config(router);
    c.moe_route_scale = scale;
    MoE moe(c, 0);
    const auto routing = moe->route(torch::randn({20, 32}));
    EXPECT_LT((routing.weights.sum(-1) - scale).abs().max().item<double>(), 1e-6) << router;
  }
}

// Test 2: the bias moves the selection but never the weights: the chosen experts' weights are their un-biased
// scores, renormalised; a token whose selection stays keeps its weights exactly.
TEST(Moe, SelectionBiasChangesSelectionNotWeights) {
  torch::manual_seed(3);
  MoE moe(moe_config("sigmoid"), 0);
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({30, 32});
  const auto before = moe->route(x);
  moe->selection_bias[3] = 10.0;  // expert 3 now wins every token
  const auto after = moe->route(x);
  EXPECT_TRUE((after.experts == 3).any(-1).all().item<bool>());
  const auto scores = after.logits.sigmoid();
  const auto picked = scores.gather(1, after.experts);
  EXPECT_LT((after.weights - picked / picked.sum(-1, true)).abs().max().item<double>(), 1e-6);
  int64_t unchanged = 0;
  for (int64_t n = 0; n < 30; ++n) {
    const auto a = std::get<0>(before.experts[n].sort()), b = std::get<0>(after.experts[n].sort());
    if (!torch::equal(a, b)) continue;
    ++unchanged;
    EXPECT_TRUE(torch::equal(std::get<0>(before.weights[n].sort()), std::get<0>(after.weights[n].sort())));
  }
  EXPECT_GT(unchanged, 0);
  EXPECT_LT(unchanged, 30);
}

// Test 3: uniform router probabilities give L_aux = α exactly (Σ_i f_i = 1); zero logits give z = β (ln E)².
TEST(Moe, UniformRoutingGivesAlphaAndZLossOfLogE) {
  auto c = moe_config();
  c.moe_aux_loss_coef = 0.01;
  c.moe_z_loss_coef = 0.0;
  MoE moe(c, 0);
  moe->train();
  {
    torch::NoGradGuard no_grad;
    moe->router->weight.zero_();
  }
  moe(torch::randn({2, 5, 32}));
  EXPECT_NEAR(moe->take_auxiliary().loss.item<double>(), 0.01, 1e-9);
  c.moe_aux_loss_coef = 0.0;
  c.moe_z_loss_coef = 1e-3;
  MoE z_only(c, 0);
  {
    torch::NoGradGuard no_grad;
    z_only->router->weight.zero_();
  }
  z_only(torch::randn({2, 5, 32}));
  EXPECT_NEAR(z_only->take_auxiliary().loss.item<double>(), 1e-3 * std::pow(std::log(4.0), 2), 1e-9);
}

// The auxiliary loss exists only for training forwards, reaches the router, and is taken once.
TEST(Moe, AuxiliaryLossIsTrainingOnlyAndReachesTheRouter) {
  torch::manual_seed(4);
  auto model = build_language_model(moe_config(), 37);
  const auto tokens = torch::randint(0, 37, {2, 8}, torch::kLong);
  model->eval();
  model(tokens);
  EXPECT_FALSE(take_auxiliary(*model).loss.defined());
  model->train();
  model(tokens);
  auto aux = take_auxiliary(*model);
  ASSERT_TRUE(aux.loss.defined());
  EXPECT_EQ(aux.metrics.count("moe_balance_loss"), 1u);
  EXPECT_EQ(aux.metrics.count("moe1_load_max"), 1u);
  EXPECT_GE(aux.metrics.at("moe0_load_max").item<double>(), 1.0);
  aux.loss.backward();
  EXPECT_GT(model->named_parameters()["blocks.0.moe.router.weight"].grad().abs().max().item<double>(), 0);
  EXPECT_FALSE(take_auxiliary(*model).loss.defined());
}

// Aux-loss-free balancing: b_i ← b_i − u·sign(load_i − mean load) after a step; no gradient reaches b.
TEST(Moe, BiasBalancingLowersOverloadedExperts) {
  auto c = moe_config();
  c.moe_top_k = 1;
  c.moe_bias_update_rate = 1e-3;
  MoE moe(c, 0);
  moe->train();
  {
    torch::NoGradGuard no_grad;
    moe->router->weight.zero_();
    moe->router->weight[0].fill_(1.0);  // x with a positive sum goes to expert 0
  }
  const auto taken = torch::ones({}), skipped = torch::zeros({});
  moe(torch::rand({1, 6, 32}) + 0.1);
  moe->after_optimizer_step(skipped);  // a skipped update moves nothing and drops its loads
  EXPECT_TRUE(torch::equal(moe->selection_bias, torch::zeros({4})));
  moe->after_optimizer_step(taken);
  EXPECT_TRUE(torch::equal(moe->selection_bias, torch::zeros({4})));
  moe(torch::rand({1, 6, 32}) + 0.1);
  moe->after_optimizer_step(taken);
  EXPECT_TRUE(torch::allclose(moe->selection_bias, torch::tensor({-1e-3, 1e-3, 1e-3, 1e-3})));
  EXPECT_FALSE(moe->selection_bias.requires_grad());
  moe->after_optimizer_step(taken);  // no forward since: no load, no move
  EXPECT_TRUE(torch::allclose(moe->selection_bias, torch::tensor({-1e-3, 1e-3, 1e-3, 1e-3})));
}

// CE-MoE pattern tests: one expert at top-1 (weight 1) is the dense SwiGLU; the active-parameter count matches a
// hand count.
TEST(Moe, OneExpertTopOneEqualsDense) {
  torch::manual_seed(5);
  auto dense = build_language_model(testing::tiny_model_config(0.2), 37);
  auto c = moe_config();
  c.moe_experts = 1;
  c.moe_top_k = 1;
  c.moe_expert_ffn_dim = 0;
  auto moe = build_language_model(c, 37);
  torch::NoGradGuard no_grad;
  auto weights = moe->named_parameters();
  for (const auto& item : dense->named_parameters()) {
    std::string name = item.key();
    const auto at = name.find(".mlp.");
    if (at != std::string::npos) name.replace(at, 5, ".moe.experts.0.");
    weights[name].copy_(item.value());
  }
  const auto tokens = torch::randint(0, 37, {2, 9}, torch::kLong);
  EXPECT_LT((moe(tokens) - dense(tokens)).abs().max().item<double>(), 1e-6);
}

TEST(Moe, ActiveParametersMatchHandCount) {
  auto c = moe_config();
  c.n_layers = 4;
  c.ffn_pattern = "DDDM";
  c.moe_experts = 8;
  c.moe_top_k = 2;
  c.moe_shared_experts = 1;
  auto model = build_language_model(c, 37);
  const int64_t d = 32, expert = 3 * d * 16, dense_ffn = 3 * d * 128;
  EXPECT_EQ(inactive_expert_parameters(*model), (8 - 2) * expert);
  // Four dense layers' worth of base model, minus one dense FFN, plus router, bias, 8 experts and one shared.
  auto four_layers = testing::tiny_model_config(0.2);
  four_layers.n_layers = 4;
  const int64_t base = build_language_model(four_layers, 37)->param_counts().total;
  EXPECT_EQ(model->param_counts().total, base - dense_ffn + (d * 8 + 8) + 8 * expert + expert);
}

}  // namespace
}  // namespace inkstone
