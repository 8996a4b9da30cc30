// Residual routing (AttnRes, block AttnRes, MHAR, delta) against float64 references (docs/backbones.md, "AttnRes"
// through "Delta AttnRes").
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/module_weights.h"
#include "config/config.h"
#include "models/delta_conversion.h"
#include "models/language_model.h"
#include "models/residual_routing.h"
#include "tests/fixtures.h"
#include "tests/models/decode_fixtures.h"

namespace inkstone {
namespace {

constexpr double kRoutingEps = 1e-6;

ModelConfig routed_config(const std::string& residual, int64_t heads = 1, int64_t n_layers = 3) {
  auto c = testing::tiny_model_config(/*init_std=*/0.2);
  c.n_layers = n_layers;
  c.residual = choice_named<ResidualMode>(residual).value();
  c.residual_heads = heads;
  return c;
}

using testing::max_abs_diff;

// Every routing query and gain drawn at random, so no test passes by the zero init alone.
void randomise_routing(LanguageModelImpl& model, double scale = 1.0) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.routing->parameters()) p.normal_(0.0, scale);
}

// The MHAR definition written out source by source and head by head in float64.
torch::Tensor ref_route(const std::vector<torch::Tensor>& sources, const torch::Tensor& q, const torch::Tensor& g,
                        int64_t heads) {
  const int64_t d = sources[0].size(-1), width = d / heads;
  std::vector<torch::Tensor> logits;  // [B, T, H] per source
  for (const auto& s : sources) {
    const auto k = s / torch::sqrt(s.pow(2).mean(-1, true) + kRoutingEps) * g;  // full-d statistic
    std::vector<torch::Tensor> per_head;
    for (int64_t h = 0; h < heads; ++h)
      per_head.push_back((k.narrow(-1, h * width, width) * q.narrow(0, h * width, width)).sum(-1));
    logits.push_back(torch::stack(per_head, -1));
  }
  const auto w = torch::stack(logits).softmax(0);  // [S, B, T, H]
  std::vector<torch::Tensor> out_heads;
  for (int64_t h = 0; h < heads; ++h) {
    auto acc = torch::zeros_like(sources[0].narrow(-1, 0, width));
    for (size_t i = 0; i < sources.size(); ++i)
      acc = acc + w[i].select(-1, h).unsqueeze(-1) * sources[i].narrow(-1, h * width, width);
    out_heads.push_back(acc);
  }
  return torch::cat(out_heads, -1);
}

std::vector<torch::Tensor> random_sources(int64_t count, int64_t d) {
  std::vector<torch::Tensor> s;
  for (int64_t i = 0; i < count; ++i) s.push_back(torch::randn({2, 3, d}, torch::kDouble) * (1.0 + i));
  return s;
}

TEST(ZooRouting, RouteMatchesFloat64MultiHeadDefinition) {
  torch::manual_seed(1);
  for (const int64_t heads : {1, 2, 4}) {
    const auto gain = 1.0 + 0.3 * torch::randn({8}, torch::kDouble);
    const auto q = torch::randn({8}, torch::kDouble);
    const auto sources = random_sources(5, 8);
    const auto out = route_sources(torch::stack(sources), q, gain, kRoutingEps, heads);
    EXPECT_LT(max_abs_diff(out, ref_route(sources, q, gain, heads)), 1e-12) << "heads " << heads;
  }
}

TEST(ZooRouting, ZeroQueryGivesTheMeanOfTheSources) {
  const auto sources = random_sources(4, 8);
  const auto out = route_sources(torch::stack(sources), torch::zeros({8}, torch::kDouble),
                                 torch::ones({8}, torch::kDouble), kRoutingEps, 2);
  EXPECT_LT(max_abs_diff(out, torch::stack(sources).mean(0)), 1e-14);
}

// With one head, MHAR is AttnRes: the same model config under both names gives bitwise the same logits.
TEST(ZooRouting, MharWithOneHeadIsBitIdenticalToAttnRes) {
  const auto tokens = torch::randint(0, 11, {2, 7}, torch::kLong);
  torch::manual_seed(3);
  auto attnres = build_language_model(routed_config("attnres"), 11);
  randomise_routing(*attnres);
  torch::manual_seed(3);
  auto mhar = build_language_model(routed_config("mhar", 1), 11);
  randomise_routing(*mhar);
  EXPECT_TRUE(torch::equal(attnres->forward(tokens), mhar->forward(tokens)));
}

// The key statistic spans the full width: enlarging head 0's slice of one source changes head 1's depth weights
// (with a per-head norm, head 1 would not notice).
TEST(ZooRouting, MharKeyNormUsesTheFullWidth) {
  const auto gain = torch::ones({4}, torch::kDouble);
  const auto q = torch::tensor({0.0, 0.0, 1.0, -1.0}, torch::kDouble);
  auto a = torch::tensor({1.0, 1.0, 2.0, 0.0}, torch::kDouble).view({1, 1, 4});
  const auto b = torch::tensor({1.0, 1.0, 0.0, 2.0}, torch::kDouble).view({1, 1, 4});
  const auto before = route_sources(torch::stack({a, b}), q, gain, kRoutingEps, 2);
  a = a * torch::tensor({10.0, 10.0, 1.0, 1.0}, torch::kDouble);
  const auto after = route_sources(torch::stack({a, b}), q, gain, kRoutingEps, 2);
  // Head 1 reads slice [2, 4), which is unchanged in both sources; only its weights can move it.
  EXPECT_GT(max_abs_diff(before.narrow(-1, 2, 2), after.narrow(-1, 2, 2)), 0.1);
}

// Sources whose H slices are copies of one vector: each MHAR head with query slice q0 scores like one head over
// the full width with the query q0 / H repeated.
TEST(ZooRouting, EqualQuerySlicesOnSliceHomogeneousSourcesGiveOneHead) {
  torch::manual_seed(4);
  const int64_t heads = 4, width = 3;
  const auto gain = torch::ones({heads * width}, torch::kDouble);
  std::vector<torch::Tensor> sources;
  for (int i = 0; i < 3; ++i) sources.push_back(torch::randn({2, 5, width}, torch::kDouble).repeat({1, 1, heads}));
  const auto q0 = torch::randn({width}, torch::kDouble);
  const auto stacked = torch::stack(sources);
  const auto multi = route_sources(stacked, q0.repeat({heads}), gain, kRoutingEps, heads);
  const auto single = route_sources(stacked, q0.repeat({heads}) / heads, gain, kRoutingEps, 1);
  EXPECT_LT(max_abs_diff(multi, single), 1e-14);
}

// Central differences in float64 against autograd, for the query, the key gain and the sources.
TEST(ZooRouting, RouteGradientsMatchFiniteDifferences) {
  torch::manual_seed(5);
  torch::NoGradGuard outer;
  auto gain = 1.0 + 0.3 * torch::randn({6}, torch::kDouble);
  auto q = torch::randn({6}, torch::kDouble);
  auto sources = torch::randn({3, 1, 2, 6}, torch::kDouble);
  const auto probe = torch::randn({1, 2, 6}, torch::kDouble);
  const auto loss = [&] { return (route_sources(sources, q, gain, kRoutingEps, 2) * probe).sum(); };

  std::vector<torch::Tensor*> inputs{&q, &gain, &sources};
  std::vector<torch::Tensor> grads;
  {
    torch::AutoGradMode grad_on(true);
    for (auto* t : inputs) t->set_requires_grad(true);
    loss().backward();
    for (auto* t : inputs) {
      grads.push_back(t->grad().clone());
      t->set_requires_grad(false);
    }
  }
  const double h = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto flat = inputs[i]->view(-1);
    for (int64_t j = 0; j < flat.numel(); j += 3) {
      const double saved = flat[j].item<double>();
      flat[j] = saved + h;
      const double up = loss().item<double>();
      flat[j] = saved - h;
      const double down = loss().item<double>();
      flat[j] = saved;
      EXPECT_NEAR(grads[i].view(-1)[j].item<double>(), (up - down) / (2 * h), 1e-7) << "input " << i << " at " << j;
    }
  }
}

TEST(ZooRouting, RoutingNeverMixesPositions) {
  torch::manual_seed(6);
  const auto gain = torch::ones({8}, torch::kDouble);
  const auto q = torch::randn({8}, torch::kDouble);
  const auto sources = torch::randn({4, 3, 5, 8}, torch::kDouble);
  const auto batch_perm = torch::tensor({2, 0, 1}, torch::kLong);
  const auto time_perm = torch::tensor({4, 1, 3, 0, 2}, torch::kLong);
  const auto permuted = sources.index_select(1, batch_perm).index_select(2, time_perm);
  const auto expected =
      route_sources(sources, q, gain, kRoutingEps, 2).index_select(0, batch_perm).index_select(1, time_perm);
  EXPECT_LT(max_abs_diff(route_sources(permuted, q, gain, kRoutingEps, 2), expected), 1e-15);
}

// A stream driven by hand: site inputs for made-up sublayer outputs.
struct DrivenStream {
  ModelConfig config;
  ResidualRouter router{nullptr};
  std::unique_ptr<ResidualStream> stream;

  explicit DrivenStream(ModelConfig c, const torch::Tensor& embedding) : config(std::move(c)) {
    router = ResidualRouter(config);
    router->to(torch::kDouble);
    stream = residual_stream_starter(config, router.get())(embedding);
  }
};

TEST(ZooRouting, AttnResLayerZeroSeesExactlyTheEmbedding) {
  const auto emb = torch::randn({2, 3, 32}, torch::kDouble);
  for (const char* mode : {"attnres", "block_attnres"}) {
    DrivenStream s(routed_config(mode), emb);
    torch::NoGradGuard no_grad;
    s.router->site(0).query.normal_();
    EXPECT_TRUE(torch::equal(s.stream->input(mixer_site(0)), emb)) << mode;
  }
}

// One block holding every layer (S ≥ L): after layer 0 the sources are {emb} and the running sum of outputs, so
// zero queries give (emb + p) / 2 at every later site.
TEST(ZooRouting, BlockAttnResWithOneHugeBlockAveragesEmbeddingAndPartialSum) {
  auto c = routed_config("block_attnres", 1, 3);
  c.residual_blocks = 1;
  const auto emb = torch::randn({2, 3, 32}, torch::kDouble);
  DrivenStream s(c, emb);
  torch::NoGradGuard no_grad;
  torch::Tensor partial;
  for (int64_t site = 0; site < final_site(3); ++site) {
    const auto h = s.stream->input(site);
    if (site == 0) EXPECT_TRUE(torch::equal(h, emb));
    if (site > 0) EXPECT_LT(max_abs_diff(h, (emb + partial) / 2), 1e-14) << "site " << site;
    const auto out = torch::randn_like(emb);
    partial = partial.defined() ? partial + out : out;
    s.stream->add(site, out);
  }
  EXPECT_LT(max_abs_diff(s.stream->input(final_site(3)), (emb + partial) / 2), 1e-14);
}

// S = 1: every layer closes a block at its mixer site; compared with the algorithm of docs/backbones.md,
// "Block AttnRes", written as a loop.
TEST(ZooRouting, BlockAttnResWithOneLayerPerBlockMatchesHandLoop) {
  torch::manual_seed(7);
  const int64_t L = 3;
  auto c = routed_config("block_attnres", 2, L);
  c.residual_blocks = L;
  const auto emb = torch::randn({2, 3, 32}, torch::kDouble);
  DrivenStream s(c, emb);
  torch::NoGradGuard no_grad;
  for (auto& p : s.router->parameters()) p.normal_(0.5, 0.5);
  const auto ref_site = [&](int64_t site, const std::vector<torch::Tensor>& sources) {
    auto& r = s.router->site(site);
    return ref_route(sources, r.query, r.key_gain, 2);
  };
  std::vector<torch::Tensor> blocks;
  torch::Tensor partial = emb;
  for (int64_t layer = 0; layer < L; ++layer) {
    auto sources = blocks;
    sources.push_back(partial);
    EXPECT_LT(max_abs_diff(s.stream->input(mixer_site(layer)), ref_site(mixer_site(layer), sources)), 1e-12);
    blocks.push_back(partial);  // ℓ mod 1 = 0: a boundary at every layer
    const auto a = torch::randn_like(emb);
    s.stream->add(mixer_site(layer), a);
    partial = a;
    sources = blocks;
    sources.push_back(partial);
    EXPECT_LT(max_abs_diff(s.stream->input(ffn_site(layer)), ref_site(ffn_site(layer), sources)), 1e-12);
    const auto m = torch::randn_like(emb);
    s.stream->add(ffn_site(layer), m);
    partial = partial + m;
  }
  auto sources = blocks;
  sources.push_back(partial);
  EXPECT_LT(max_abs_diff(s.stream->input(final_site(L)), ref_site(final_site(L), sources)), 1e-12);
}

// q = 0, α = 1: h = p + mean([null] ∪ Δ). With the null source at 0 the deltas sum to the final p (they
// telescope), so the final site sees p · (1 + 1 / (number of sources)).
TEST(ZooRouting, DeltaSourcesTelescopeToTheStreamWithUnitGate) {
  for (const char* sources : {"sublayer", "block"}) {
    const int64_t L = 4;
    auto c = routed_config("delta", 2, L);
    c.residual_delta = choice_named<DeltaSources>(sources).value();
    c.residual_blocks = 2;
    const auto emb = torch::randn({2, 3, 32}, torch::kDouble);
    DrivenStream s(c, emb);
    torch::NoGradGuard no_grad;
    for (int64_t site = 0; site <= final_site(L); ++site) s.router->site(site).gate.fill_(1.0);
    EXPECT_LT(max_abs_diff(s.stream->input(0), emb + emb / 2), 1e-14);  // sources [0, emb]
    auto p = emb;
    for (int64_t site = 0; site < final_site(L); ++site) {
      s.stream->input(site);
      const auto out = torch::randn_like(emb);
      p = p + out;
      s.stream->add(site, out);
    }
    const double count = std::string(sources) == "block" ? 1 + 1 + 2 : 1 + 1 + 2 * L;  // null, emb, deltas
    EXPECT_LT(max_abs_diff(s.stream->input(final_site(L)), p + p / count), 1e-12) << sources;
  }
}

// Every gate of model.residual_delta_gate at the first site, with zero queries and null source, where the
// sources are [0, emb]: h = emb + α · emb / 2, α per token for sigmoid_token.
TEST(ZooRouting, DeltaGatesScaleTheRoutedTermAsDefined) {
  torch::manual_seed(9);
  const auto emb = torch::randn({2, 3, 32}, torch::kDouble);
  const double closed = 1.0 / (1.0 + std::exp(2.0));  // σ(−2)
  for (const char* gate : {"zero", "sigmoid", "sigmoid_token", "none"}) {
    auto c = routed_config("delta", 2);
    c.residual_delta_gate = choice_named<DeltaGate>(gate).value();
    DrivenStream s(c, emb);
    const std::string kind = gate;
    const double alpha = kind == "zero" ? 0.0 : kind == "none" ? 1.0 : closed;
    EXPECT_LT(max_abs_diff(s.stream->input(0), emb + alpha * emb / 2), 1e-14) << gate;
    EXPECT_EQ(s.router->site(0).gate.defined(), kind != "none") << gate;
  }
  auto c = routed_config("delta", 2);
  c.residual_delta_gate = DeltaGate::sigmoid_token;
  DrivenStream s(c, emb);
  auto& site = s.router->site(0);
  {
    torch::NoGradGuard no_grad;
    site.gate_weight.normal_(0.0, 0.3);
    site.gate.fill_(0.5);
  }
  const auto alpha = torch::sigmoid(torch::matmul(emb, site.gate_weight) + 0.5 - 2.0).unsqueeze(-1);  // [B, T, 1]
  EXPECT_LT(max_abs_diff(s.stream->input(0), emb + alpha * emb / 2), 1e-14);
}

// α = 0 with any queries and null sources: the converted model's logits are the plain model's, bit for bit, also
// under the KV-cache decode path.
TEST(ZooRouting, DeltaConversionKeepsThePlainLogitsExactly) {
  const auto tokens = torch::randint(0, 11, {2, 9}, torch::kLong);
  auto plain_config = routed_config("plain");
  auto plain = build_language_model(plain_config, 11);
  for (const char* sources : {"sublayer", "block"}) {
    auto routed = build_language_model(delta_routing_config(plain_config, 4, choice_named<DeltaSources>(sources).value(), 2), 11);
    load_plain_weights(*routed, module_weights(*plain), "test");
    {
      torch::NoGradGuard no_grad;
      for (auto& item : routed->routing->named_parameters())
        if (item.key().find("gate") == std::string::npos) item.value().normal_();
    }
    EXPECT_EQ(max_abs_diff(routed->forward(tokens), plain->forward(tokens)), 0.0) << sources;
  }
}

TEST(ZooRouting, DeltaGateGetsAGradientAtZero) {
  torch::manual_seed(8);
  auto model = build_language_model(routed_config("delta", 2), 11);
  randomise_routing(*model);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model->routing->named_parameters())
      if (item.key().find("gate") != std::string::npos) item.value().zero_();
  }
  const auto tokens = torch::randint(0, 11, {2, 6}, torch::kLong);
  model->forward(tokens).pow(2).mean().backward();
  for (auto& item : model->routing->named_parameters())
    if (item.key().find("gate") != std::string::npos)
      EXPECT_GT(item.value().grad().abs().item<double>(), 0.0) << item.key();
}

TEST(ZooRouting, ConversionRejectsARoutedSourceAndForeignWeights) {
  EXPECT_NE(testing::input_error_of([] { delta_routing_config(routed_config("mhar", 2), 2, DeltaSources::sublayer, 1); })
                .find("model.residual = \"mhar\""),
            std::string::npos);
  auto routed = build_language_model(routed_config("delta"), 11);
  NamedTensors weights = module_weights(*build_language_model(routed_config("plain"), 11));
  weights.emplace_back("extra.weight", torch::zeros({1}));
  EXPECT_NE(testing::input_error_of([&] { load_plain_weights(*routed, weights, "ckpt"); }).find("extra.weight"),
            std::string::npos);
}

// Every routing mode, causal: prefill plus one token per step through the KV cache equals the full forward.
TEST(ZooRouting, KVCacheDecodeEqualsFullForwardForEveryMode) {
  torch::manual_seed(9);
  const auto tokens = torch::randint(0, 11, {2, 8}, torch::kLong);
  for (const char* mode : {"attnres", "block_attnres", "mhar", "delta"}) {
    auto c = routed_config(mode, std::string(mode) == "attnres" ? 1 : 2, 3);
    c.residual_blocks = 2;
    auto model = build_language_model(c, 11);
    randomise_routing(*model, 0.5);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto full = model->forward(tokens);
    const auto decoded = testing::decode_in_pieces(model, tokens, 5);
    EXPECT_LT(max_abs_diff(decoded, full), 1e-5) << mode;
  }
}

// Bidirectional and time-conditioned (adaLN-Zero) routed models train: finite gradients reach the routing sites.
TEST(ZooRouting, RoutedModelsTrainBidirectionalWithTimeConditioning) {
  torch::manual_seed(10);
  for (const char* mode : {"attnres", "block_attnres", "mhar", "delta"}) {
    auto c = testing::tiny_model_config(0.2, /*time_conditioning=*/true);
    c.residual = choice_named<ResidualMode>(mode).value();
    c.residual_heads = std::string(mode) == "attnres" ? 1 : 2;
    c.residual_blocks = 1;
    auto model = build_language_model(c, 11);
    randomise_routing(*model, 0.5);
    WindowInputs args;
    args.mask = MaskMode::bidirectional;
    args.noise_level = torch::rand({2});
    {  // adaLN-Zero starts every branch and the head at 0; move them so the routing matters
      torch::NoGradGuard no_grad;
      for (auto& item : model->named_parameters())
        if (item.key().find("adaln") != std::string::npos || item.key() == "head.weight") item.value().normal_(0, 0.1);
    }
    const auto out = model->forward(torch::randint(0, 11, {2, 6}, torch::kLong), args);
    out.logsumexp(-1).mean().backward();
    double routing_grad = 0;
    for (auto& p : model->routing->parameters()) {
      ASSERT_TRUE(p.grad().defined()) << mode;
      ASSERT_TRUE(torch::isfinite(p.grad()).all().item<bool>()) << mode;
      routing_grad += p.grad().abs().sum().item<double>();
    }
    EXPECT_GT(routing_grad, 0.0) << mode;
  }
}

TEST(ZooRouting, RoutingParametersAndCounts) {
  auto model = build_language_model(routed_config("delta", 2, 3), 11);
  const auto counts = model->param_counts();
  EXPECT_EQ(counts.routing, (2 * 3 + 1) * (32 + 32 + 32 + 1));  // query, key gain, null source, gate per site
  const auto plain = build_language_model(routed_config("plain", 1, 3), 11)->param_counts();
  EXPECT_EQ(counts.total, plain.total + counts.routing);
  EXPECT_EQ(plain.routing, 0);
  for (const auto& [name, role] : model->param_roles())
    if (name.rfind("routing.", 0) == 0)
      EXPECT_EQ(role, name.find("key_norm") != std::string::npos ? ParamRole::norm : ParamRole::zero) << name;
}

TEST(ZooRouting, ConfigRejectsInconsistentRouting) {
  const auto error_of = [](const std::string& toml) {
    return testing::input_error_of([&] { config_from_string(toml, "test.toml"); });
  };
  EXPECT_NE(error_of("[model]\nresidual = \"attnres\"\nresidual_heads = 2\n").find("use \"mhar\""), std::string::npos);
  EXPECT_NE(error_of("[model]\nd_model = 32\nresidual = \"mhar\"\nresidual_heads = 3\n").find("must divide"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nn_layers = 2\nresidual = \"block_attnres\"\nresidual_blocks = 3\n")
                .find("model.residual_blocks = 3"),
            std::string::npos);
  EXPECT_NE(error_of("[model]\nresidual = \"highway\"\n").find("model.residual"), std::string::npos);
}

}  // namespace
}  // namespace inkstone
