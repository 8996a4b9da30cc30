// The pieces of the Sumi / GIDD training recipe: the time mix (some sequences with a t per token), the IS-divergence
// part of the uniform NELBO and its weight β_IS, GIDD's per-token weights (checked against the float64 KL form),
// and the logits' z-loss; plus the config checks that keep these keys from being ignored.
#include <gtest/gtest.h>

#include <cmath>

#include "dataset/byte_tokenizer.h"
#include "objectives/ar.h"
#include "objectives/diffusion_objective.h"
#include "objectives/diffusion_time.h"
#include "objectives/uniform_noise.h"
#include "tests/fixtures.h"
#include "tests/objectives/diffusion_fixtures.h"

namespace inkstone {
namespace {
using testing::random_batch;
using testing::randomise;
using testing::tiny_config;

TEST(TimeMix, RowsWithATPerTokenAreAnExactShareOfEveryPrefixAndSplitFree) {
  EXPECT_TRUE(per_token_time_rows(0.5, 0, 8, torch::kCPU)
                  .equal(torch::tensor({false, true, false, true, false, true, false, true})));
  const auto whole = per_token_time_rows(0.3, 0, 10, torch::kCPU);
  EXPECT_EQ(whole.sum().item<int64_t>(), 3);
  const auto split =
      torch::cat({per_token_time_rows(0.3, 0, 4, torch::kCPU), per_token_time_rows(0.3, 4, 6, torch::kCPU)});
  EXPECT_TRUE(split.equal(whole));
  EXPECT_EQ(per_token_time_rows(0.0, 0, 10, torch::kCPU).sum().item<int64_t>(), 0);
  EXPECT_EQ(per_token_time_rows(1.0, 0, 10, torch::kCPU).sum().item<int64_t>(), 10);
}

TEST(TimeMix, HalfTheSequencesShareOneTAndHalfDrawOnePerToken) {
  DiffusionConfig config = default_config().diffusion;
  config.time_mix = 0.5;
  torch::manual_seed(41);
  const auto t = sample_training_time(config, 8, 6, 0, 8, torch::kCPU);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{8, 6}));
  const auto spread = std::get<0>(t.max(1)) - std::get<0>(t.min(1));
  const auto per_token = per_token_time_rows(0.5, 0, 8, torch::kCPU);
  EXPECT_TRUE(spread.gt(0).equal(per_token));
  // The shared rows are stratified over the batch's 8 sequences, the per-token draws over its 48 tokens.
  const auto u = (t.to(torch::kDouble) - config.t_min) / (1.0 - config.t_min);
  const auto shared_strata = (u.select(1, 0) * 8).floor().masked_select(~per_token);
  EXPECT_TRUE(shared_strata.equal(torch::tensor({0.0, 2.0, 4.0, 6.0}, torch::kDouble)));
  const auto token_strata = (u * 48).floor() - torch::arange(48, torch::kDouble).view({8, 6});
  EXPECT_EQ(token_strata.masked_select(per_token.unsqueeze(1).expand({8, 6})).abs().max().item<double>(), 0.0);

  config.time_mix = 0.0;
  EXPECT_EQ(sample_training_time(config, 8, 6, 0, 8, torch::kCPU).sizes(), (std::vector<int64_t>{8, 1}));
}

// −a'/(a N q_z) times KL(q‖p) and r − log r − 1, from the N-vectors q and p (docs/diffusion.md, "KL form").
struct KlFormParts {
  double kl, is;
};
KlFormParts kl_form_parts(const torch::Tensor& x_hat, int64_t x, int64_t z, double a, double a_prime) {
  const double n = static_cast<double>(x_hat.numel());
  auto q = torch::full({x_hat.numel()}, (1.0 - a) / n, torch::kDouble);
  q[x] += a;
  const auto p = a * x_hat + (1.0 - a) / n;
  const double q_z = q[z].item<double>(), r = q_z / p[z].item<double>();
  const double w = -a_prime / (a * n * q_z);
  return {w * (q * (q.log() - p.log())).sum().item<double>(), w * (r - std::log(r) - 1.0)};
}

TEST(UniformNelbo, TheIsDivergencePartEqualsTheKlFormsSecondTerm) {
  const auto log_x_hat = torch::log_softmax(torch::tensor({0.3, -1.2, 2.0, 0.1, -0.5}, torch::kDouble), -1);
  for (const double t : {0.05, 0.3, 0.7, 0.95}) {
    for (int64_t x = 0; x < 5; ++x) {
      for (int64_t z = 0; z < 5; ++z) {
        SCOPED_TRACE(::testing::Message() << "t " << t << " x " << x << " z " << z);
        const double a = 1.0 - t;
        const auto terms =
            uniform_token_terms(log_x_hat, torch::full({}, x, torch::kLong), torch::full({}, z, torch::kLong),
                                torch::full({}, a, torch::kDouble), torch::full({}, -1.0, torch::kDouble), 5);
        const auto parts = kl_form_parts(log_x_hat.exp(), x, z, a, -1.0);
        EXPECT_NEAR(terms.is_divergence.item<double>(), parts.is, 1e-12);
        EXPECT_NEAR(terms.nelbo.item<double>() - terms.is_divergence.item<double>(), parts.kl, 1e-11);
      }
    }
  }
}

// With weighting = snr the training loss per token is GIDD's w · (KL + β_IS · IS) with w = 1 where z ≠ x and
// (1 − α)/(1 + (N − 1) α) where z = x (the KL and IS terms without the ELBO's factor); with α = 1 − t and β_IS = 1
// it is the NELBO times t (1 − t).
TEST(DiffusionObjective, SnrWeightsAreGiddsAndTheIsWeightScalesTheIsTerm) {
  for (const double beta : {1.0, 0.25}) {
    SCOPED_TRACE(::testing::Message() << "beta_IS " << beta);
    torch::manual_seed(42);
    const Config config = tiny_config(
        "uniform_diffusion", false,
        {"diffusion.weighting=\"snr\"", "diffusion.schedule_eps=1e-9", "diffusion.is_weight=" + std::to_string(beta)});
    DiffusionObjective objective(config, ByteTokenizer(), std::make_shared<UniformNoise>(config.diffusion));
    auto model = build_language_model(config.model, 260);
    randomise(*model);
    const Batch batch = random_batch(2, 10);
    const auto t = torch::rand({2, 10}) * 0.9 + 0.05;  // a t per token
    const auto alpha = objective.schedule().alpha(t);
    auto z = torch::where(batch.real, objective.corrupt(batch.tokens, t, nullptr), batch.tokens);
    z.index_put_({0, torch::indexing::Slice(0, 3)}, batch.tokens.index({0, torch::indexing::Slice(0, 3)}));
    const auto scores = objective.score(*model, batch, t, z);

    WindowInputs args;
    args.mask = MaskMode::bidirectional;
    const auto logits = model->forward(z, args).to(torch::kDouble);
    const auto member = objective.support().member_mask(torch::kCPU);
    const auto support_ids = torch::nonzero(member).view({-1});
    const int64_t n = support_ids.numel();
    ASSERT_EQ(n, 257);
    int64_t unchanged = 0;
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < 10; ++i) {
        if (!batch.real[b][i].item<bool>()) continue;
        const auto x_hat = logits[b][i].index_select(0, support_ids).softmax(0);
        // Positions of x and z among the support's ids.
        const auto where = [&](int64_t id) { return support_ids.eq(id).nonzero().item<int64_t>(); };
        const int64_t x = where(batch.tokens[b][i].item<int64_t>()), zi = where(z[b][i].item<int64_t>());
        const double a = alpha[b][i].item<double>();
        const auto parts = kl_form_parts(x_hat, x, zi, a, -1.0);
        const double elbo_factor = 1.0 / (a * n * ((x == zi ? a : 0.0) + (1.0 - a) / n));
        const double w = x == zi ? (1.0 - a) / (1.0 + (n - 1) * a) : 1.0;
        unchanged += x == zi;
        const double expected = w * (parts.kl + beta * parts.is) / elbo_factor;
        EXPECT_NEAR(scores.weighted[b][i].item<double>(), expected, 2e-4 * std::max(1.0, expected)) << b << " " << i;
        if (beta == 1.0) {
          const double tt = t[b][i].item<double>();
          EXPECT_NEAR(scores.weighted[b][i].item<double>() / (tt * (1.0 - tt)), scores.nelbo[b][i].item<double>(),
                      3e-4 * std::max(1.0, scores.nelbo[b][i].item<double>()));
        }
      }
    }
    EXPECT_GE(unchanged, 3);
    EXPECT_EQ(scores.weighted[1].narrow(0, 7, 3).abs().sum().item<double>(), 0.0);  // padding
  }
}

TEST(ZLoss, AddsItsWeightTimesTheLogNormaliserSquaredAndLogsIt) {
  const auto model_config = tiny_config("ar", false).model;
  auto model = build_language_model(model_config, 260);
  randomise(*model);
  const Batch batch = random_batch(2, 12);
  const double weight = 1e-2;
  for (const std::string name : {"ar", "uniform_diffusion", "masked_diffusion"}) {
    SCOPED_TRACE(name);
    auto loss_with = [&](double z_loss) {
      const Config config = tiny_config(name, false, {"objective.z_loss=" + std::to_string(z_loss)});
      torch::manual_seed(43);  // the same t and z_t in both calls
      return make_objective(config, ByteTokenizer())->loss(*model, batch);
    };
    const auto plain = loss_with(0.0), with_z = loss_with(weight);
    EXPECT_EQ(plain.metric_sums.count("log_z_squared"), 0u);
    const double z_sum = with_z.metric_sums.at("log_z_squared").item<double>();
    EXPECT_GT(z_sum, 0.0);
    EXPECT_NEAR(with_z.loss_sum.item<double>() - plain.loss_sum.item<double>(), weight * z_sum,
                1e-4 * plain.loss_sum.item<double>());
    if (name == "ar") {
      // log²Z of the causal logits at the real targets' positions.
      WindowInputs args;
      args.mask = MaskMode::causal;
      const auto inputs = batch.tokens.narrow(1, 0, 11);
      const auto log_z = torch::logsumexp(model->forward(inputs, args).to(torch::kDouble), -1);
      const auto real = batch.real.narrow(1, 1, 11) & batch.real.narrow(1, 0, 11);
      EXPECT_NEAR(z_sum, log_z.square().masked_select(real).sum().item<double>(), 1e-4 * z_sum);
    }
  }
}

TEST(SumiRecipeConfig, KeysAnObjectiveWouldIgnoreAreRefused) {
  using testing::input_error_of;
  EXPECT_NE(input_error_of([] { tiny_config("grpo", false, {"objective.z_loss=1e-5"}); }).find("objective.z_loss"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              tiny_config("masked_diffusion", false, {"diffusion.is_weight=0.5"});
            }).find("diffusion.is_weight = 0.5"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              tiny_config("uniform_diffusion", true, {"diffusion.time_mix=0.5"});
            }).find("diffusion.time_mix = 0.5 needs model.time_conditioning = false"),
            std::string::npos);
  EXPECT_EQ(input_error_of([] {
              tiny_config("uniform_diffusion", false,
                          {"diffusion.time_mix=0.5", "objective.z_loss=1e-5", "diffusion.is_weight=0.5"});
            }),
            "");
}

}  // namespace
}  // namespace inkstone
