// The noise processes behind the diffusion objectives and samplers (objectives/noise_process.h): their levels and
// rates, and each NELBO against float64 oracles built from nothing but the forward marginals — the discrete-time
// KL of the exact posteriors as the step shrinks, GIDD's published weights for the mixture, and the corruption's
// frequencies.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>

#include "dataset/byte_tokenizer.h"
#include "objectives/diffusion_objective.h"
#include "objectives/masked_noise.h"
#include "objectives/mixture_noise.h"
#include "objectives/uniform_noise.h"
#include "sampler/diffusion_posterior.h"
#include "tests/objectives/diffusion_fixtures.h"

namespace inkstone {
namespace {

// Ids 0..4 are the support (N = 5), id 5 lies outside it, id 6 is the mask.
constexpr int64_t kVocab = 7, kOutside = 5, kMask = 6, kSupport = 5;

DiffusionConfig oracle_config(double eps) {
  DiffusionConfig config = default_config().diffusion;
  config.schedule = NoiseScheduleKind::log_linear;
  config.schedule_eps = eps;
  config.mixture_uniform = 0.3;
  return config;
}

struct Named {
  const char* name;
  std::shared_ptr<const NoiseProcess> noise;
};

std::vector<Named> processes(double eps = 1e-3) {
  const DiffusionConfig c = oracle_config(eps);
  return {{"uniform", std::make_shared<UniformNoise>(c)},
          {"masked", std::make_shared<MaskedNoise>(c)},
          {"mixture", std::make_shared<MixtureNoise>(c)}};
}

torch::Tensor support_mask() {
  auto support = torch::ones({kVocab}, torch::kBool);
  support[kOutside] = false;
  support[kMask] = false;
  return support;
}

// q_t(· | x) over the vocabulary, from the levels: α e_x + μ e_m + υ/N 𝟙_S.
torch::Tensor marginal(const NoiseLevelsAt& at, const torch::Tensor& x_dist) {
  auto q = at.keep * x_dist + at.uniform / kSupport * support_mask().to(torch::kDouble);
  q[kMask] += at.mask;
  return q;
}

TEST(NoiseProcess, LevelsSumToOneAndRatesAreTheirTimeDerivatives) {
  for (const auto& [name, noise] : processes()) {
    SCOPED_TRACE(name);
    const auto t = torch::linspace(0.02, 0.98, 11, torch::kDouble);
    const NoiseLevels level = noise->levels(t), rate = noise->rates(t);
    EXPECT_TRUE((level.keep + level.mask + level.uniform).allclose(torch::ones_like(t), 0, 1e-15));
    const double h = 1e-6;
    const NoiseLevels up = noise->levels(t + h), down = noise->levels(t - h);
    for (const auto& [got, high, low] : {std::tuple{rate.keep, up.keep, down.keep},
                                         std::tuple{rate.mask, up.mask, down.mask},
                                         std::tuple{rate.uniform, up.uniform, down.uniform}})
      EXPECT_TRUE(got.allclose((high - low) / (2 * h), 1e-7, 1e-8)) << got << (high - low) / (2 * h);
    EXPECT_TRUE(noise->log_snr_rate(t).allclose(rate.keep / (level.keep * (1 - level.keep)), 1e-15, 0));
  }
}

// On the log-linear schedule with ε = 0 (a = 1 − t) the mixture is GIDD's hybrid process: c_t = B (t(1 − t))^{γ/2},
// α = (1 − t)/C, μ = t/C, υ = c/C, and at t = ½ a share p_u of the tokens are uniform draws.
TEST(MixtureNoise, IsGiddsHybridProcessOnTheLinearSchedule) {
  DiffusionConfig config = oracle_config(0.0);
  config.mixture_gamma = 1.5;
  const MixtureNoise noise(config);
  const double b = std::pow(2.0, 1.5) * 0.3 / 0.7;
  for (const double t : {0.1, 0.5, 0.77}) {
    const double c = b * std::pow(t * (1 - t), 0.75), total = 1 + c;
    const NoiseLevelsAt at = noise.levels_at(t);
    EXPECT_NEAR(at.keep, (1 - t) / total, 1e-15);
    EXPECT_NEAR(at.mask, t / total, 1e-15);
    EXPECT_NEAR(at.uniform, c / total, 1e-15);
  }
  EXPECT_NEAR(noise.levels_at(0.5).uniform, 0.3, 1e-15);
}

// The weight that turns KL + IS into the NELBO is GIDD's (its loss code: weight_on_m, weight_on_u, weight_on_x),
// with c' = (γ/2)(1 − 2t)/(t(1 − t)) c; KL and IS are formed here from explicit q_t(· | x) and q_t(· | x̂).
TEST(MixtureNoise, ElboWeightsAreGiddsOnTheLinearSchedule) {
  const MixtureNoise noise(oracle_config(0.0));
  torch::manual_seed(5);
  const auto logits = torch::randn({kVocab}, torch::kDouble).masked_fill(~support_mask(), -INFINITY);
  const auto log_x_hat = logits.log_softmax(-1);
  const auto x_hat = log_x_hat.exp();
  const int64_t x = 2;
  const double n = kSupport, b = 2 * 0.3 / 0.7;
  for (const double t : {0.15, 0.6}) {
    const double c = b * std::sqrt(t * (1 - t)), c_prime = 0.5 * (1 - 2 * t) / (t * (1 - t)) * c;
    const double on_mask = 1 / ((1 - t) * t);
    const double on_uniform = (c + (1 - t) * c_prime) / ((1 - t) * c);
    const double on_x = (c + (1 - t) * c_prime) / n / ((1 - t) * (1 - t + c / n));
    const NoiseLevelsAt at = noise.levels_at(t);
    const auto q = marginal(at, torch::one_hot(torch::tensor(x), kVocab).to(torch::kDouble));
    const auto p = marginal(at, x_hat);
    const auto reachable = q.gt(0);
    const double kl = (q * (q / p).log()).masked_select(reachable).sum().item<double>();
    for (const auto& [z, weight] : {std::pair<int64_t, double>{kMask, on_mask}, {0, on_uniform}, {x, on_x}}) {
      const double r = q[z].item<double>() / p[z].item<double>();
      const auto tt = torch::tensor({t}, torch::kDouble);
      const auto terms = noise.token_terms(log_x_hat.unsqueeze(0), torch::tensor({x}), torch::tensor({z}),
                                           noise.levels(tt), noise.rates(tt), {kSupport, kMask});
      EXPECT_NEAR(terms.nelbo.item<double>(), weight * (kl + r - std::log(r) - 1), 1e-12 * weight) << "z " << z;
      EXPECT_NEAR(terms.is_divergence.item<double>(), weight * (r - std::log(r) - 1), 1e-12 * weight) << "z " << z;
    }
  }
}

// The continuous-time NELBO is the limit of the discrete-time one: for s = t − Δ,
//   E_{z ~ q_t(·|x)} ℓ(z) = lim (1/Δ) E_{z ~ q_t(·|x)} KL(q(z_s | z, x) ‖ q(z_s | z, x̂)),
// the posteriors from sampler/diffusion_posterior.h (x̂ = e_x gives the true one). Every process, in float64.
TEST(NoiseProcess, NelboIsTheLimitOfTheDiscreteTimeKlOfThePosteriors) {
  torch::manual_seed(8);
  const auto support = support_mask();
  const auto logits = torch::randn({kVocab}, torch::kDouble).masked_fill(~support, -INFINITY);
  const auto log_x_hat = logits.log_softmax(-1);
  const auto x_hat = log_x_hat.exp();
  const int64_t x = 3;
  const auto clean = torch::one_hot(torch::tensor(x), kVocab).to(torch::kDouble);
  for (const auto& [name, noise] : processes()) {
    for (const double t : {0.1, 0.45, 0.9}) {
      SCOPED_TRACE(::testing::Message() << name << " t " << t);
      const double step = 1e-6;
      const NoiseLevelsAt at_t = noise->levels_at(t), at_s = noise->levels_at(t - step);
      const auto q_t = marginal(at_t, clean);
      const auto tt = torch::tensor({t}, torch::kDouble);
      double nelbo = 0, discrete = 0;
      for (int64_t z = 0; z < kVocab; ++z) {
        const double weight = q_t[z].item<double>();
        if (weight == 0) continue;
        const auto zz = torch::tensor({z});
        const auto terms = noise->token_terms(log_x_hat.unsqueeze(0), torch::tensor({x}), zz, noise->levels(tt),
                                              noise->rates(tt), {kSupport, noise->masks() ? kMask : -1});
        nelbo += weight * terms.nelbo.item<double>();
        const auto truth = interpolating_posterior(clean.unsqueeze(0), zz, at_t, at_s, support, kMask)[0];
        const auto model = interpolating_posterior(x_hat.unsqueeze(0), zz, at_t, at_s, support, kMask)[0];
        const auto kept = truth.gt(0);
        discrete += weight * (truth * (truth / model).log()).masked_select(kept).sum().item<double>() / step;
      }
      EXPECT_GT(nelbo, 0.0);
      EXPECT_NEAR(nelbo, discrete, 1e-4 * nelbo);
    }
  }
}

// Corruption at one t: a token is kept with probability α + υ/N (a uniform draw may land on it), masked with μ,
// and becomes each other support id with υ/N; the counts lie within 5 standard deviations.
TEST(MixtureNoise, CorruptionFollowsTheMarginals) {
  const Config config = testing::tiny_config("mixture_diffusion", false, {"diffusion.mixture_uniform=0.4"});
  const ByteTokenizer tokenizer;
  DiffusionObjective objective(config, tokenizer, std::make_shared<MixtureNoise>(config.diffusion));
  torch::manual_seed(21);
  const int64_t rows = 400, length = 100, draws = rows * length;
  const auto x = torch::full({rows, length}, 'e', torch::kLong);
  const auto t = torch::full({rows, 1}, 0.5f);
  const auto z = objective.corrupt(x, t, nullptr);
  const NoiseLevelsAt at = objective.noise()->levels_at(0.5);
  const double n = static_cast<double>(objective.support().size());
  const auto expect_share = [&](const torch::Tensor& hits, double p, const char* what) {
    const double seen = hits.sum().item<double>() / draws;
    EXPECT_NEAR(seen, p, 5 * std::sqrt(p * (1 - p) / draws)) << what;
  };
  expect_share(z.eq('e'), at.keep + at.uniform / n, "kept");
  expect_share(z.eq(tokenizer.specials().mask), at.mask, "masked");
  expect_share(z.ne('e') & z.ne(tokenizer.specials().mask), at.uniform * (n - 1) / n, "moved");
  EXPECT_TRUE(objective.support().contains_all(z.masked_select(z.ne(tokenizer.specials().mask))));
}

}  // namespace
}  // namespace inkstone
