// The Qwen3-style backbone against float64 references written out here (docs/backbones.md, "Base block" and
// "adaLN-Zero time conditioning").
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "checkpoint/module_weights.h"
#include "core/errors.h"
#include "core/torch_compat.h"
#include "models/attention.h"
#include "models/block.h"
#include "models/language_model.h"
#include "models/model_dims.h"
#include "models/rms_norm.h"
#include "models/rope.h"
#include "models/time_embedding.h"
#include "tests/fixtures.h"
#include "tests/models/decode_fixtures.h"

namespace inkstone {
namespace {

constexpr double kTheta = 10000.0;
constexpr double kEps = 1e-6;

ModelConfig tiny_config() { return testing::tiny_model_config(/*init_std=*/0.2); }

using testing::max_abs_diff;

// ---- float64 references ----

torch::Tensor ref_rms_norm(const torch::Tensor& x, const torch::Tensor& weight) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + kEps) * weight.to(torch::kDouble);
}

// x: [B, H, T, D], positions: [B, T]; the rotate-half formula coordinate by coordinate.
torch::Tensor ref_rope(const torch::Tensor& x, const torch::Tensor& positions, double theta) {
  auto out = torch::empty_like(x);
  const auto in = x.accessor<double, 4>();
  auto o = out.accessor<double, 4>();
  const auto pos = positions.accessor<int64_t, 2>();
  const int64_t half = x.size(3) / 2;
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t h = 0; h < x.size(1); ++h)
      for (int64_t t = 0; t < x.size(2); ++t)
        for (int64_t j = 0; j < half; ++j) {
          const double angle = static_cast<double>(pos[b][t]) * std::pow(theta, -2.0 * j / x.size(3));
          const double a = in[b][h][t][j], c = in[b][h][t][j + half];
          o[b][h][t][j] = a * std::cos(angle) - c * std::sin(angle);
          o[b][h][t][j + half] = c * std::cos(angle) + a * std::sin(angle);
        }
  return out;
}

// Softmax attention written out head by head; query head h reads KV head h·n_kv/n_q.
torch::Tensor ref_attention(AttentionImpl& attn, const torch::Tensor& x64, const ModelConfig& c, MaskMode mode) {
  const int64_t B = x64.size(0), T = x64.size(1), hd = resolved_head_dim(c);
  const auto positions = torch::arange(T, torch::kLong).expand({B, T}).contiguous();
  const auto project = [&](const torch::nn::Linear& proj, int64_t heads) {
    return torch::matmul(x64, proj->weight.to(torch::kDouble).t()).view({B, T, heads, hd});
  };
  const auto q = ref_rope(ref_rms_norm(project(attn.q_proj, c.n_heads), attn.q_norm->weight).permute({0, 2, 1, 3}).contiguous(), positions, kTheta);
  const auto k = ref_rope(ref_rms_norm(project(attn.k_proj, c.n_kv_heads), attn.k_norm->weight).permute({0, 2, 1, 3}).contiguous(), positions, kTheta);
  const auto v = project(attn.v_proj, c.n_kv_heads).permute({0, 2, 1, 3});
  const auto future = torch::ones({T, T}, torch::kBool).triu(1);
  std::vector<torch::Tensor> heads;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const int64_t g = h * c.n_kv_heads / c.n_heads;
    auto scores = torch::matmul(q.select(1, h), k.select(1, g).transpose(-1, -2)) / std::sqrt(double(hd));
    if (mode == MaskMode::causal) scores = scores.masked_fill(future, -INFINITY);
    heads.push_back(torch::matmul(scores.softmax(-1), v.select(1, g)));
  }
  const auto y = torch::stack(heads, 2).reshape({B, T, c.n_heads * hd});
  return torch::matmul(y, attn.o_proj->weight.to(torch::kDouble).t());
}

AttentionContext plain_context(int64_t B, int64_t T, const ModelConfig& c, MaskMode mode) {
  const auto positions = torch::arange(T, torch::kLong).expand({B, T});
  return {rope_table(positions, resolved_head_dim(c), c.rope_theta),
          make_attention_mask(mode, 0, T, T, torch::Tensor(), torch::kCPU), nullptr};
}

// ---- norms and positions ----

TEST(Backbone, RMSNormMatchesFloat64Formula) {
  torch::manual_seed(0);
  RMSNorm norm(16, kEps);
  norm->weight.data().uniform_(0.5, 1.5);
  const auto x = torch::randn({3, 5, 16}) * 3;
  EXPECT_LT(max_abs_diff(norm(x), ref_rms_norm(x.to(torch::kDouble), norm->weight)), 1e-6);
}

// Gradients of sum(y ⊙ probe) with respect to every input, by autograd.
std::vector<torch::Tensor> gradients_of(const torch::Tensor& y, const std::vector<torch::Tensor>& inputs,
                                        const torch::Tensor& probe) {
  return torch::autograd::grad({(y * probe.to(y.dtype())).sum()}, inputs);
}

// The fused CPU kernel against autograd through the float64 formula, forward and backward, at a width that is
// not a multiple of its 8 lanes and at the block width.
TEST(Backbone, RMSNormGradientsMatchFloat64Autograd) {
  torch::manual_seed(3);
  for (int64_t width : {13, 192}) {
    const auto x = (torch::randn({4, 9, width}) * 2).requires_grad_();
    const auto weight = torch::empty({width}).uniform_(0.5, 1.5).requires_grad_();
    const auto probe = torch::randn({4, 9, width});
    const auto y = rms_norm(x, weight, kEps);
    const auto grads = gradients_of(y, {x, weight}, probe);

    const auto x64 = x.detach().to(torch::kDouble).requires_grad_();
    const auto weight64 = weight.detach().to(torch::kDouble).requires_grad_();
    const auto y64 = ref_rms_norm(x64, weight64);
    const auto ref = gradients_of(y64, {x64, weight64}, probe);
    EXPECT_LT(max_abs_diff(y, y64), 1e-5) << width;
    EXPECT_LT(max_abs_diff(grads[0], ref[0]), 1e-5) << width;
    EXPECT_LT(max_abs_diff(grads[1], ref[1]), 1e-4) << width;  // a sum over 36 rows

    // In float64 the kernel is the formula to rounding.
    const auto fused64 = gradients_of(rms_norm(x64, weight64, kEps), {x64, weight64}, probe);
    EXPECT_LT(max_abs_diff(fused64[0], ref[0]), 1e-12) << width;
    EXPECT_LT(max_abs_diff(fused64[1], ref[1]), 1e-12) << width;
  }
}

// bf16 weights (run.param_dtype): the kernel reads bf16 rows, computes in fp32 and keeps only its bf16 input and
// an fp32 factor per row; its results are the float64 formula's on the same bf16 values, rounded once to bf16
// (relative 2^-8; a weight gradient sums 36 rows).
TEST(Backbone, RMSNormOnBf16RowsIsTheFloat64FormulaRoundedOnce) {
  torch::manual_seed(4);
  const int64_t width = 192;
  const auto x = (torch::randn({4, 9, width}) * 2).to(torch::kBFloat16).requires_grad_();
  const auto weight = torch::empty({width}).uniform_(0.5, 1.5).to(torch::kBFloat16).requires_grad_();
  const auto probe = torch::randn({4, 9, width}).to(torch::kBFloat16);
  const auto y = rms_norm(x, weight, kEps);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto grads = gradients_of(y, {x, weight}, probe);
  ASSERT_EQ(grads[1].scalar_type(), torch::kBFloat16);

  const auto x64 = x.detach().to(torch::kDouble).requires_grad_();
  const auto weight64 = weight.detach().to(torch::kDouble).requires_grad_();
  const auto y64 = ref_rms_norm(x64, weight64);
  const auto ref = gradients_of(y64, {x64, weight64}, probe.to(torch::kDouble));
  const auto relative = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got.to(torch::kDouble) - want).abs() / (want.abs() + 1e-2)).max().item<double>();
  };
  EXPECT_LT(relative(y, y64), 1.0 / 128);
  EXPECT_LT(relative(grads[0], ref[0]), 1.0 / 64);
  EXPECT_LT(relative(grads[1], ref[1]), 1.0 / 64);
}

// The residual add fused with the next norm: its values and gradients are those of the add and the norm run one
// after the other, bit for bit on the CPU (h and the norm's gradient are rounded to the row type where the two ops
// would round them), and its gradients, which reach x and o through both h and y, are the float64 formula's:
// float64 to rounding, float32 to 1e-5, bf16 relative 2^-6.
TEST(Backbone, ResidualAddFusedWithRMSNormIsTheAddThenTheNorm) {
  torch::manual_seed(5);
  for (const auto& [dtype, tolerance] : std::vector<std::pair<torch::ScalarType, double>>{
           {torch::kDouble, 1e-12}, {torch::kFloat, 1e-5}, {torch::kBFloat16, 1.0 / 64}}) {
    const int64_t width = 37;
    const auto x = (torch::randn({4, 9, width}) * 2).to(dtype).requires_grad_();
    const auto o = torch::randn({4, 9, width}).to(dtype).requires_grad_();
    const auto weight = torch::empty({width}).uniform_(0.5, 1.5).to(dtype).requires_grad_();
    const auto [sum, normed] = add_rms_norm(x, o, weight, kEps);
    ASSERT_EQ(normed.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(sum, x + o)) << dtype;
    EXPECT_TRUE(torch::equal(normed, rms_norm(x + o, weight, kEps))) << dtype;

    // A loss that reads both outputs, as the stream does: h goes on to the next add, y into the sublayer.
    const auto probe_sum = torch::randn({4, 9, width}), probe_normed = torch::randn({4, 9, width});
    const auto loss = [&](const torch::Tensor& h, const torch::Tensor& y) {
      return (h * probe_sum.to(h.dtype())).sum() + (y * probe_normed.to(y.dtype())).sum();
    };
    const auto grads = torch::autograd::grad({loss(sum, normed)}, {x, o, weight});
    const auto apart_sum = x + o;
    const auto apart = torch::autograd::grad({loss(apart_sum, rms_norm(apart_sum, weight, kEps))}, {x, o, weight});
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(torch::equal(grads[k], apart[k])) << dtype << " gradient " << k;
    const auto x64 = x.detach().to(torch::kDouble).requires_grad_();
    const auto o64 = o.detach().to(torch::kDouble).requires_grad_();
    const auto weight64 = weight.detach().to(torch::kDouble).requires_grad_();
    const auto h64 = x64 + o64;
    const auto ref = torch::autograd::grad({loss(h64, ref_rms_norm(h64, weight64))}, {x64, o64, weight64});
    for (int k = 0; k < 3; ++k) {
      const double scale = ref[k].abs().max().item<double>();
      EXPECT_LT(max_abs_diff(grads[k], ref[k]), tolerance * scale) << dtype << " gradient " << k;
    }
  }
}

TEST(Backbone, RoPEMatchesFloat64RotateHalf) {
  torch::manual_seed(0);
  const auto x = torch::randn({2, 3, 5, 8});
  const auto positions = torch::randint(0, 200, {2, 5}, torch::kLong);
  const auto rotated = apply_rope(x, rope_table(positions, 8, kTheta));
  EXPECT_LT(max_abs_diff(rotated, ref_rope(x.to(torch::kDouble), positions, kTheta)), 1e-5);
}

TEST(Backbone, RoPEInnerProductDependsOnlyOnOffset) {
  torch::manual_seed(0);
  const auto q = torch::randn({1, 1, 1, 16});
  const auto k = torch::randn({1, 1, 1, 16});
  const auto dot = [&](int64_t m, int64_t n) {
    const auto at = [](int64_t p) { return rope_table(torch::full({1, 1}, p, torch::kLong), 16, kTheta); };
    return (apply_rope(q, at(m)) * apply_rope(k, at(n))).sum().item<double>();
  };
  const double reference = dot(3, 1);
  EXPECT_NEAR(dot(10, 8), reference, 1e-5);
  EXPECT_NEAR(dot(257, 255), reference, 1e-5);
  EXPECT_GT(std::abs(dot(10, 3) - reference), 1e-3);
}

// ---- attention ----

struct AttentionCase {
  int64_t n_kv_heads;
  MaskMode mode;
};

class AttentionVsReference : public ::testing::TestWithParam<AttentionCase> {};

// n_kv = n_q is plain multi-head attention; n_kv < n_q checks the GQA head mapping.
TEST_P(AttentionVsReference, MatchesFloat64SoftmaxAttention) {
  torch::manual_seed(1);
  auto c = tiny_config();
  c.n_kv_heads = GetParam().n_kv_heads;
  Attention attn(c, 0);
  torch::NoGradGuard no_grad;
  for (auto& p : attn->parameters()) p.normal_(0.0, 0.3);
  for (auto* norm : {&attn->q_norm, &attn->k_norm}) (*norm)->weight.uniform_(0.5, 1.5);
  const auto x = torch::randn({2, 7, c.d_model});
  const auto y = attn(x, plain_context(2, 7, c, GetParam().mode));
  const auto ref = ref_attention(*attn, x.to(torch::kDouble), c, GetParam().mode);
  EXPECT_LT(max_abs_diff(y, ref), 1e-5 * ref.abs().max().item<double>());
}

INSTANTIATE_TEST_SUITE_P(Backbone, AttentionVsReference,
                         ::testing::Values(AttentionCase{4, MaskMode::causal}, AttentionCase{4, MaskMode::bidirectional},
                                           AttentionCase{2, MaskMode::causal}, AttentionCase{1, MaskMode::bidirectional}));

// compat::sdpa (on libtorch 1.13 the explicit-backward attention) against autograd through softmax attention in
// float64, under the causal flag, a boolean mask and no mask.
TEST(Backbone, AttentionGradientsMatchFloat64Autograd) {
  torch::manual_seed(4);
  const int64_t B = 2, H = 3, T = 6, D = 8;
  const auto allowed = torch::rand({B, 1, T, T}) < 0.6 | torch::eye(T, torch::kBool);
  struct Case {
    c10::optional<torch::Tensor> mask;
    bool is_causal;
  };
  for (const auto& [mask, is_causal] : {Case{c10::nullopt, true}, Case{allowed, false}, Case{c10::nullopt, false}}) {
    std::vector<torch::Tensor> qkv, qkv64;
    for (int i = 0; i < 3; ++i) {
      qkv.push_back(torch::randn({B, H, T, D}).requires_grad_());
      qkv64.push_back(qkv.back().detach().to(torch::kDouble).requires_grad_());
    }
    const auto probe = torch::randn({B, H, T, D});
    const auto y = compat::sdpa(qkv[0], qkv[1], qkv[2], mask, is_causal);
    const auto grads = gradients_of(y, qkv, probe);

    auto scores = torch::matmul(qkv64[0], qkv64[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
    const auto all = torch::ones({T, T}, torch::kBool);
    const auto visible = is_causal ? all.tril() : mask.value_or(all);
    scores = scores.masked_fill(visible.logical_not(), -INFINITY);
    const auto y64 = torch::matmul(torch::softmax(scores, -1), qkv64[2]);
    const auto ref = gradients_of(y64, qkv64, probe);
    EXPECT_LT(max_abs_diff(y, y64), 1e-5) << is_causal;
    for (int i = 0; i < 3; ++i) EXPECT_LT(max_abs_diff(grads[i], ref[i]), 1e-5) << "input " << i << " " << is_causal;
  }
}

// ---- whole model ----

TEST(Backbone, FutureTokensReachPastLogitsOnlyWithoutCausalMask) {
  torch::manual_seed(2);
  auto model = build_language_model(tiny_config(), 37);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {1, 8}, torch::kLong);
  auto perturbed = tokens.clone();
  perturbed[0][5] = (tokens[0][5].item<int64_t>() + 1) % 37;
  for (auto mode : {MaskMode::causal, MaskMode::bidirectional}) {
    WindowInputs args;
    args.mask = mode;
    const auto a = model(tokens, args);
    const auto b = model(perturbed, args);
    const double past = max_abs_diff(a.narrow(1, 0, 5), b.narrow(1, 0, 5));
    if (mode == MaskMode::causal) {
      EXPECT_EQ(past, 0.0);
    } else {
      EXPECT_GT(past, 1e-4);
    }
    EXPECT_GT(max_abs_diff(a.narrow(1, 5, 3), b.narrow(1, 5, 3)), 1e-4);
  }
}

TEST(Backbone, PaddedKeysAreInvisibleToBidirectionalAttention) {
  torch::manual_seed(3);
  auto model = build_language_model(tiny_config(), 37);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {1, 9}, torch::kLong);
  WindowInputs args;
  args.mask = MaskMode::bidirectional;
  const auto alone = model(tokens.narrow(1, 0, 6), args);
  args.key_padding = torch::arange(9).lt(6).unsqueeze(0);
  const auto padded = model(tokens, args);
  EXPECT_LT(max_abs_diff(padded.narrow(1, 0, 6), alone), 1e-5);
}

TEST(Backbone, TiedEmbeddingGetsGradientFromInputAndHead) {
  torch::manual_seed(4);
  auto tied_config = tiny_config();
  auto untied_config = tied_config;
  untied_config.tie_embeddings = false;
  auto tied = build_language_model(tied_config, 37);
  auto untied = build_language_model(untied_config, 37);
  {
    torch::NoGradGuard no_grad;
    const auto source = tied->named_parameters();
    for (auto& item : untied->named_parameters()) {
      item.value().copy_(item.key() == "head.weight" ? tied->embed->weight : source[item.key()]);
    }
  }
  const auto tokens = torch::randint(0, 37, {2, 6}, torch::kLong);
  const auto targets = torch::randint(0, 37, {2 * 6}, torch::kLong);
  for (auto* model : {&tied, &untied}) {
    torch::nn::functional::cross_entropy((*model)(tokens).view({-1, 37}), targets).backward();
  }
  const auto& input_use = untied->embed->weight.grad();
  const auto& head_use = untied->head->weight.grad();
  EXPECT_GT(input_use.abs().max().item<double>(), 0.0);
  EXPECT_GT(head_use.abs().max().item<double>(), 0.0);
  EXPECT_LT(max_abs_diff(tied->embed->weight.grad(), input_use + head_use), 1e-6);
}

// Prefill, a chunk of several tokens, then one token per step: each equals the full forward's logits.
TEST(Backbone, KVCacheDecodeEqualsFullForward) {
  torch::manual_seed(5);
  auto model = build_language_model(tiny_config(), 37);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {2, 12}, torch::kLong);
  const auto full = model(tokens);
  auto cache = model->make_kv_cache(2, 12);
  EXPECT_LT(max_abs_diff(testing::decode_in_chunks(model, tokens, {5, 3, 1, 1, 1, 1}, cache), full), 1e-5);
  EXPECT_EQ(cache.length(), 12);
}

// Left-padded prompts of lengths 3, 7, 5 with their own positions, then 4 decode steps: every row equals the
// forward of its own unpadded sequence.
TEST(Backbone, KVCacheWithLeftPaddedPromptsEqualsEachRowAlone) {
  torch::manual_seed(6);
  auto model = build_language_model(tiny_config(), 37);
  torch::NoGradGuard no_grad;
  testing::expect_left_padded_decode_equals_each_row_alone(model, {3, 7, 5}, /*steps=*/4, /*vocab=*/37);
}

// ---- time conditioning (adaLN-Zero) ----

ModelConfig conditioned_config() {
  auto c = tiny_config();
  c.time_conditioning = true;
  c.tie_embeddings = false;
  return c;
}

TEST(Backbone, AdaLNZeroBlocksAreIdentityAndLogitsZeroAtInit) {
  torch::manual_seed(7);
  auto model = build_language_model(conditioned_config(), 37);
  torch::NoGradGuard no_grad;
  const auto tokens = torch::randint(0, 37, {2, 6}, torch::kLong);
  const auto sigma = torch::tensor({0.3f, 2.5f});
  const auto cond = model->time_embed(sigma);
  EXPECT_GT(cond.abs().max().item<double>(), 0.0);
  const auto context = plain_context(2, 6, model->config(), MaskMode::bidirectional);
  auto x = model->embed(tokens);
  for (const auto& block : *model->blocks) {
    const auto y = block->as<BlockImpl>()->forward(x, context, cond);
    EXPECT_TRUE(torch::equal(y, x));
    x = y;
  }
  WindowInputs args;
  args.mask = MaskMode::bidirectional;
  args.noise_level = sigma;
  EXPECT_TRUE(torch::equal(model(tokens, args), torch::zeros({2, 6, 37})));

  // The modulation is wired in: once trained away from zero, a block is no longer the identity.
  auto& block = *model->blocks[0]->as<BlockImpl>();
  block.adaln->weight.normal_(0.0, 0.1);
  x = model->embed(tokens);
  EXPECT_FALSE(torch::equal(block.forward(x, context, cond), x));
}

// bf16 weights (run.param_dtype, `sample --param-dtype bf16`): the float32 sinusoids of the noise level enter the
// time embedding in the weights' dtype, and the logits stay those of the fp32 model to bf16's precision.
TEST(Backbone, ATimeConditionedModelRunsInBf16Weights) {
  torch::manual_seed(8);
  auto model = build_language_model(conditioned_config(), 37);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(0.05 * torch::randn_like(p));  // off the zero-initialised modulation
  const auto tokens = torch::randint(0, 37, {2, 6}, torch::kLong);
  WindowInputs args;
  args.mask = MaskMode::bidirectional;
  args.noise_level = torch::tensor({0.3f, 2.5f});
  const auto fp32 = model(tokens, args);
  cast_parameters(*model, torch::kBFloat16);
  const auto bf16 = model(tokens, args);
  ASSERT_TRUE(bf16.isfinite().all().item<bool>());
  EXPECT_LT(max_abs_diff(bf16, fp32), 0.05 * fp32.abs().max().item<double>() + 0.02);
  EXPECT_GT(max_abs_diff(bf16, fp32), 0.0) << "the weights were not cast";
}

TEST(Backbone, TimestepEmbeddingMatchesSinCosFormula) {
  const std::vector<double> sigmas = {0.0, 0.37, 1.0, 25.0};
  const auto emb = sinusoidal_embedding(torch::tensor({0.0f, 0.37f, 1.0f, 25.0f}), 256, 1e4);
  ASSERT_EQ(emb.sizes(), (std::vector<int64_t>{4, 256}));
  double worst = 0;
  for (size_t b = 0; b < sigmas.size(); ++b) {
    for (int64_t i = 0; i < 128; ++i) {
      const double arg = static_cast<float>(sigmas[b]) * std::exp(-std::log(1e4) * i / 128.0);
      worst = std::max(worst, std::abs(emb[b][i].item<double>() - std::cos(arg)));
      worst = std::max(worst, std::abs(emb[b][128 + i].item<double>() - std::sin(arg)));
    }
  }
  EXPECT_LT(worst, 1e-5);
}

// ---- building ----

ModelConfig count_config() {
  auto c = tiny_config();
  c.d_model = 16;  // head_dim 4, SwiGLU width ceil(8·16/3) = 43 -> 64
  return c;
}

TEST(Backbone, ParamCountsMatchHandCount) {
  // Per block: W_q 16·16 + W_k 16·8 + W_v 16·8 + W_o 16·16 = 768, QK-norms 4 + 4, block norms 16 + 16,
  // SwiGLU 3·16·64 = 3072: 3880. Two blocks 7760, embedding 11·16 = 176, final norm 16.
  auto c = count_config();
  auto counts = build_language_model(c, 11)->param_counts();
  EXPECT_EQ(counts.total, 7952);
  EXPECT_EQ(counts.embedding, 176);
  EXPECT_EQ(counts.non_embedding, 7776);

  c.tie_embeddings = false;  // + head 11·16
  counts = build_language_model(c, 11)->param_counts();
  EXPECT_EQ(counts.total, 8128);
  EXPECT_EQ(counts.non_embedding, 7952);

  // cond_dim 8: time MLP 256·8 + 8 + 8·8 + 8 = 2128; per block adaLN 6·16·8 + 96 = 864; final 2·16·8 + 32 = 288.
  c.time_conditioning = true;
  EXPECT_EQ(build_language_model(c, 11)->param_counts().total, 8128 + 2128 + 2 * 864 + 288);
}

TEST(Backbone, SwiGLUWidthRoundsTwoThirdsOf4dUpTo64) {
  auto c = tiny_config();
  c.d_model = 128;
  EXPECT_EQ(resolved_ffn_dim(c), 384);
  c.d_model = 96;  // 8·96/3 = 256 exactly
  EXPECT_EQ(resolved_ffn_dim(c), 256);
  c.ffn_dim = 100;
  EXPECT_EQ(resolved_ffn_dim(c), 100);
}

TEST(Backbone, ParameterNamesAndInitRoles) {
  torch::manual_seed(8);
  auto c = tiny_config();
  c.init_std = 0.02;
  c.tie_embeddings = false;
  auto model = build_language_model(c, 37);
  const auto params = model->named_parameters();
  for (const char* name : {"embed.weight", "blocks.0.attn_norm.weight", "blocks.0.attn.q_proj.weight",
                           "blocks.0.attn.k_proj.weight", "blocks.0.attn.v_proj.weight", "blocks.0.attn.o_proj.weight",
                           "blocks.0.attn.q_norm.weight", "blocks.1.attn.k_norm.weight", "blocks.1.mlp_norm.weight",
                           "blocks.1.mlp.gate_proj.weight", "blocks.1.mlp.up_proj.weight",
                           "blocks.1.mlp.down_proj.weight", "final_norm.weight", "head.weight"}) {
    EXPECT_TRUE(params.contains(name)) << name;
  }
  EXPECT_EQ(params.size(), 3 + 2 * 11);
  const auto role_list = model->param_roles();
  const std::map<std::string, ParamRole> roles(role_list.begin(), role_list.end());
  EXPECT_EQ(roles.at("blocks.0.attn.k_proj.weight"), ParamRole::qk);
  EXPECT_EQ(roles.at("blocks.0.attn.o_proj.weight"), ParamRole::vo);
  EXPECT_EQ(roles.at("blocks.1.mlp.down_proj.weight"), ParamRole::mlp);
  EXPECT_EQ(roles.at("head.weight"), ParamRole::head);
  EXPECT_EQ(roles.at("final_norm.weight"), ParamRole::norm);
  EXPECT_NEAR(params["embed.weight"].std().item<double>(), 0.02, 0.002);
  EXPECT_NEAR(params["blocks.1.mlp.gate_proj.weight"].std().item<double>(), 0.02, 0.002);
  EXPECT_TRUE(torch::equal(params["blocks.0.attn.q_norm.weight"], torch::ones({8})));
}

TEST(Backbone, BuilderRejectsInconsistentConfigs) {
  auto c = tiny_config();
  c.init = "orthogonal";
  EXPECT_THROW(build_language_model(c, 37), InputError);
  c = tiny_config();
  c.time_conditioning = true;  // tied head cannot start at zero
  EXPECT_THROW(build_language_model(c, 37), InputError);
  c = tiny_config();
  c.vocab_size = 20;
  EXPECT_THROW(build_language_model(c, 37), InputError);
  c.vocab_size = 64;
  EXPECT_EQ(build_language_model(c, 37)->vocab_size(), 64);
}

}  // namespace
}  // namespace inkstone
