// The diffusion sampler: reference posteriors (docs/diffusion.md, "Test vectors"), the exponential race, T-step
// sampling against the analytic marginal for a fixed x̂, clamping, x̂ reuse, confidence commits and infill templates.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/config.h"
#include "core/errors.h"
#include "dataset/byte_tokenizer.h"
#include "sampler/diffusion_canvas.h"
#include "sampler/diffusion_posterior.h"
#include "sampler/diffusion_sampler.h"
#include "tests/fixtures.h"
#include "tests/sampler/noise_fixtures.h"

namespace inkstone {
namespace {

using testing::masked_posterior;
using testing::toy_noise;
using testing::ToyNoise;
using testing::uniform_posterior;

const std::vector<double> kLogits = {0.3, -1.2, 2.0, 0.1, -0.5};  // docs/diffusion.md, "Test vectors": N = 5

torch::Tensor reference_x_hat() { return torch::tensor(kLogits, torch::kDouble).softmax(-1); }

torch::Tensor all_ids(int64_t n) { return torch::ones({n}, torch::kBool); }

TEST(DiffusionPosterior, UniformMatchesReferenceVectors) {
  const auto x_hat = reference_x_hat().unsqueeze(0).expand({2, 5});
  const auto z_t = torch::tensor({2, 4}, torch::kLong);
  const auto q = uniform_posterior(x_hat, z_t, 0.4, 0.5, all_ids(5));
  const std::vector<std::vector<double>> expected = {
      {0.0164877677, 0.0115480400, 0.9436427000, 0.0153351670, 0.0129863253},
      {0.0456700610, 0.0319873316, 0.1244680892, 0.0424774309, 0.7553970874}};
  for (int r = 0; r < 2; ++r)
    for (int v = 0; v < 5; ++v) EXPECT_NEAR(q[r][v].item<double>(), expected[r][v], 1e-10) << r << "," << v;
}

// Brute-force Bayes: q(z_s | z_t, x̂) ∝ q(z_t | z_s) Σ_x x̂_x q_s(z_s | x), on the support only.
TEST(DiffusionPosterior, UniformEqualsBruteForceBayesAndRowsSumToOne) {
  torch::manual_seed(3);
  const int64_t vocab = 9;
  auto support = all_ids(vocab);
  support[7] = false;  // an id outside the support gets no mass
  const double n = 8, alpha_t = 0.27, alpha_s = 0.61, alpha_ts = alpha_t / alpha_s;
  auto logits = torch::randn({vocab}, torch::kDouble).masked_fill(~support, -INFINITY);
  const auto x_hat = logits.softmax(-1);
  for (int64_t z = 0; z < vocab; ++z) {
    if (z == 7) continue;
    const auto q = uniform_posterior(x_hat.unsqueeze(0), torch::tensor({z}), alpha_t, alpha_s, support)[0];
    std::vector<double> joint(vocab, 0.0);
    double total = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      if (v == 7) continue;
      const double forward = alpha_ts * (v == z) + (1 - alpha_ts) / n;               // q(z_t = z | z_s = v)
      const double marginal = alpha_s * x_hat[v].item<double>() + (1 - alpha_s) / n;  // q_s(v | x̂)
      joint[v] = forward * marginal;
      total += joint[v];
    }
    for (int64_t v = 0; v < vocab; ++v) EXPECT_NEAR(q[v].item<double>(), joint[v] / total, 1e-15);
    EXPECT_NEAR(q.sum().item<double>(), 1.0, 1e-14);
  }
}

TEST(DiffusionPosterior, MaskedMovesMassFromMaskToXHatAndCopiesUnmasked) {
  const int64_t mask = 5;
  auto x_hat = torch::cat({reference_x_hat(), torch::zeros({1}, torch::kDouble)});  // no mass on the mask
  const auto q = masked_posterior(x_hat.unsqueeze(0).expand({2, 6}), torch::tensor({mask, int64_t{3}}), 0.4, 0.5,
                                  mask);
  for (int v = 0; v < 5; ++v) EXPECT_NEAR(q[0][v].item<double>(), (0.5 - 0.4) / 0.6 * x_hat[v].item<double>(), 1e-15);
  EXPECT_NEAR(q[0][mask].item<double>(), 0.5 / 0.6, 1e-15);
  EXPECT_NEAR(q[0].sum().item<double>(), 1.0, 1e-15);
  EXPECT_EQ(q[1][3].item<double>(), 1.0);
  EXPECT_EQ(q[1].sum().item<double>(), 1.0);
}

// In float64 (the default) and float32 (sample.posterior = "float32": the race's uniforms in float too).
TEST(DiffusionPosterior, ExponentialRaceDrawsFromTheDistribution) {
  for (const auto dtype : {torch::kDouble, torch::kFloat}) {
    auto generator = at::globalContext().defaultGenerator(torch::kCPU).clone();
    generator.set_current_seed(5);
    const int64_t draws = 200000;
    const auto probs = reference_x_hat();
    const auto z = exponential_race(probs.to(dtype).unsqueeze(0).expand({draws, 5}), generator);
    const auto freq = torch::bincount(z, {}, 5).to(torch::kDouble) / draws;
    for (int v = 0; v < 5; ++v) {
      const double p = probs[v].item<double>();
      EXPECT_NEAR(freq[v].item<double>(), p, 5 * std::sqrt(p * (1 - p) / draws)) << v << " " << dtype;
    }
  }
}

// A process over ids 0..4 of a 7-id vocabulary (5 and 6 are outside the support; 6 is the mask).
DiffusionProcess toy_process(ToyNoise noise, bool time_conditioned = false) {
  DiffusionProcess p;
  p.noise = toy_noise(noise);
  p.support = std::make_shared<NoiseSupport>(std::vector<int64_t>{0, 1, 2, 3, 4}, 7);
  p.mask_id = 6;
  p.time_conditioned = time_conditioned;
  return p;
}

// A denoiser whose x̂ is the reference distribution whatever it sees (ids 5 and 6 get logit 0; the support
// restriction must remove them).
Denoiser constant_denoiser(int64_t* calls = nullptr) {
  return [calls](const torch::Tensor& z, const torch::Tensor&) {
    if (calls) ++*calls;
    auto row = torch::cat({torch::tensor(kLogits, torch::kFloat), torch::zeros({2})});
    return row.expand({z.size(0), z.size(1), 7}).contiguous();
  };
}

DiffusionCanvas free_canvas(int64_t rows, int64_t length) {
  return {torch::zeros({rows, length}, torch::kLong), torch::zeros({rows, length}, torch::kBool)};
}

// 20,000 positions sampled under the constant x̂ land on ids 0..4 with the frequencies of `law` (within 5 standard
// deviations), never on id 5 (outside the support) or on the mask.
void expect_draws_follow(const DiffusionProcess& process, const DiffusionSampleOptions& options,
                         const torch::Tensor& law) {
  const int64_t rows = 400, length = 50, draws = rows * length;
  const auto result = sample_diffusion(constant_denoiser(), process, free_canvas(rows, length), options, torch::kCPU);
  const auto freq = torch::bincount(result.tokens.flatten(), {}, 7).to(torch::kDouble) / draws;
  EXPECT_EQ(freq[5].item<double>(), 0.0);
  EXPECT_EQ(freq[6].item<double>(), 0.0);
  for (int v = 0; v < 5; ++v) {
    const double p = law[v].item<double>();
    EXPECT_NEAR(freq[v].item<double>(), p, 5 * std::sqrt(p * (1 - p) / draws)) << v;
  }
}

// The samplers' names are defined beside them; any other is refused by the key it came from.
TEST(DiffusionSampler, NamesAreTheSamplersOwnAndAnyOtherIsRefusedByKey) {
  EXPECT_EQ(diffusion_method_names(), (std::vector<std::string>{"ancestral", "confidence", "adaptive"}));
  EXPECT_EQ(noise_removal_names(), (std::vector<std::string>{"ancestral", "greedy", "none"}));
  EXPECT_EQ(diffusion_method_from_name("adaptive"), DiffusionMethod::adaptive);
  EXPECT_EQ(noise_removal_from_name("greedy"), NoiseRemoval::greedy);
  EXPECT_EQ(testing::input_error_of([] { diffusion_method_from_name("ancestal"); }),
            "sample.diffusion_sampler = 'ancestal' is not one of: ancestral, confidence, adaptive");
  EXPECT_EQ(testing::input_error_of([] { noise_removal_from_name("argmax", "--noise-removal"); }),
            "--noise-removal = 'argmax' is not one of: ancestral, greedy, none");
}

// Positions are independent under a constant x̂, so the law of z after each step is p ← p·Q_k with Q_k the
// posterior matrix of step k; the final ancestral step uses α_s = 1.
TEST(DiffusionSampler, UniformAncestralMatchesTheAnalyticMarginal) {
  const auto process = toy_process(ToyNoise::uniform);
  DiffusionSampleOptions options;
  options.steps = 8;
  options.seed = 17;
  const auto support = process.support->member_mask(torch::kCPU);
  auto alpha = [&](double t) { return process.noise->levels_at(t).keep; };
  auto x_hat = torch::cat({reference_x_hat(), torch::zeros({2}, torch::kDouble)});
  auto law = support.to(torch::kDouble) / 5.0;
  auto step = [&](double alpha_t, double alpha_s) {
    auto q = uniform_posterior(x_hat.unsqueeze(0).expand({7, 7}), torch::arange(7), alpha_t, alpha_s, support);
    q = q.masked_fill(~support.unsqueeze(1), 0.0);  // rows of ids outside the support carry no mass
    law = law.matmul(q);
  };
  for (int64_t k = 0; k < options.steps; ++k) {
    const double t = 1.0 - (1.0 - options.t_end) * k / options.steps;
    const double s = 1.0 - (1.0 - options.t_end) * (k + 1) / options.steps;
    step(alpha(t), alpha(s));
  }
  step(alpha(options.t_end), 1.0);

  expect_draws_follow(process, options, law);
  // The posterior is exact Bayes for data x ~ x̂, so a chain started at q_1(·|x̂) ends at x̂; the uniform prior
  // differs from q_1 by α_1 = 1e-3, which leaves the analytic law within 1e-5 of x̂.
  for (int v = 0; v < 5; ++v) EXPECT_NEAR(law[v].item<double>(), reference_x_hat()[v].item<double>(), 1e-5);
}

// Mixture noise: the prior mixes the mask and uniform draws, and each step may unmask, move or re-mask a token, so
// the law of a position over all 7 ids (the mask included) follows p ← p·Q_k; the fused and the eager sampler both
// draw from it, and it ends within 2e-3 of x̂ (the prior differs from q_1(·|x̂) by α_1 = 1e-3).
TEST(DiffusionSampler, MixtureAncestralMatchesTheAnalyticMarginal) {
  const auto process = toy_process(ToyNoise::mixture);
  const auto support = process.support->member_mask(torch::kCPU);
  const auto x_hat = torch::cat({reference_x_hat(), torch::zeros({2}, torch::kDouble)});
  const NoiseLevelsAt at_one = process.noise->levels_at(1.0);
  const double mask_share = at_one.mask / (at_one.mask + at_one.uniform);
  EXPECT_GT(mask_share, 0.9);
  EXPECT_LT(mask_share, 0.99);
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "eager");
    DiffusionSampleOptions options;
    options.steps = 8;
    options.seed = 23;
    options.fused = fused;
    auto law = support.to(torch::kDouble) * (1 - mask_share) / 5.0;
    law[6] = mask_share;
    auto step = [&](const NoiseLevelsAt& at_t, const NoiseLevelsAt& at_s) {
      auto q = interpolating_posterior(x_hat.unsqueeze(0).expand({7, 7}), torch::arange(7), at_t, at_s, support, 6);
      law = law.matmul(q.masked_fill(torch::arange(7).eq(5).unsqueeze(1), 0.0));  // id 5 is never drawn
    };
    for (int64_t k = 0; k < options.steps; ++k) {
      const double t = 1.0 - (1.0 - options.t_end) * k / options.steps;
      const double s = 1.0 - (1.0 - options.t_end) * (k + 1) / options.steps;
      step(process.noise->levels_at(t), process.noise->levels_at(s));
    }
    step(process.noise->levels_at(options.t_end), NoiseLevelsAt{});

    expect_draws_follow(process, options, law);
    for (int v = 0; v < 5; ++v) EXPECT_NEAR(law[v].item<double>(), reference_x_hat()[v].item<double>(), 2e-3) << v;
  }
}

TEST(DiffusionSampler, MaskedAncestralEndsWithXHatAndNoMasks) {
  const auto process = toy_process(ToyNoise::masked);
  DiffusionSampleOptions options;
  options.steps = 16;
  const int64_t rows = 400, length = 50, draws = rows * length;
  const auto result = sample_diffusion(constant_denoiser(), process, free_canvas(rows, length), options, torch::kCPU);
  const auto freq = torch::bincount(result.tokens.flatten(), {}, 7).to(torch::kDouble) / draws;
  EXPECT_EQ(freq[6].item<double>(), 0.0);
  for (int v = 0; v < 5; ++v) {
    const double p = reference_x_hat()[v].item<double>();
    EXPECT_NEAR(freq[v].item<double>(), p, 5 * std::sqrt(p * (1 - p) / draws)) << v;
  }
}

TEST(DiffusionSampler, ReusesXHatWhileNothingChangesUnlessTimeConditioned) {
  DiffusionSampleOptions options;
  options.steps = 64;
  int64_t calls = 0;
  auto result = sample_diffusion(constant_denoiser(&calls), toy_process(ToyNoise::masked),
                                 free_canvas(1, 3), options, torch::kCPU);
  EXPECT_EQ(result.model_calls, calls);
  EXPECT_LE(calls, 3 + 2);  // one call per change of z (3 positions unmask) plus the first and the last
  calls = 0;
  result = sample_diffusion(constant_denoiser(&calls), toy_process(ToyNoise::masked, true), free_canvas(1, 3),
                            options, torch::kCPU);
  EXPECT_EQ(calls, options.steps + 1);
}

TEST(DiffusionSampler, FixedPositionsAreClampedAndSeedsReproduce) {
  for (auto noise : {ToyNoise::uniform, ToyNoise::masked, ToyNoise::mixture}) {
    for (auto method : {DiffusionMethod::ancestral, DiffusionMethod::confidence}) {
      auto canvas = free_canvas(6, 10);
      canvas.tokens.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 3)}, 4);
      canvas.fixed.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, 3)}, true);
      canvas.tokens.index_put_({torch::indexing::Slice(), 8}, 1);
      canvas.fixed.index_put_({torch::indexing::Slice(), 8}, true);
      DiffusionSampleOptions options;
      options.steps = 5;
      options.method = method;
      options.seed = 9;
      const auto a = sample_diffusion(constant_denoiser(), toy_process(noise), canvas, options, torch::kCPU).tokens;
      const auto b = sample_diffusion(constant_denoiser(), toy_process(noise), canvas, options, torch::kCPU).tokens;
      EXPECT_TRUE(a.equal(b));
      EXPECT_TRUE(a.index({torch::indexing::Slice(), torch::indexing::Slice(0, 3)}).eq(4).all().item<bool>());
      EXPECT_TRUE(a.index({torch::indexing::Slice(), 8}).eq(1).all().item<bool>());
      EXPECT_TRUE(a.lt(5).all().item<bool>()) << "a generated token left the support or stayed masked";
    }
  }
}

TEST(DiffusionSampler, GreedyConfidenceCommitsTheArgmaxEverywhere) {
  for (auto noise : {ToyNoise::uniform, ToyNoise::masked, ToyNoise::mixture}) {
    DiffusionSampleOptions options;
    options.steps = 3;  // 7 positions over 3 steps: 2, 2, 3 commits
    options.method = DiffusionMethod::confidence;
    options.filter.temperature = 0;
    std::vector<int64_t> traced;
    options.trace_every = 1;
    options.on_trace = [&](int64_t step, const torch::Tensor&) { traced.push_back(step); };
    const auto z = sample_diffusion(constant_denoiser(), toy_process(noise), free_canvas(2, 7), options,
                                    torch::kCPU).tokens;
    EXPECT_TRUE(z.eq(2).all().item<bool>()) << z;  // argmax of the reference x̂
    EXPECT_EQ(traced, (std::vector<int64_t>{1, 2, 3}));
  }
}

// Threshold decoding (docs/diffusion.md, "Threshold decoding"): under masked noise a masked position scores
// max x̂ = 0.687 for the reference x̂. A threshold below it commits every position at the first step, which is then
// the one-step sample; a threshold above it leaves the schedule alone; the ancestral sampler refuses one.
TEST(DiffusionSampler, AThresholdCommitsEveryPositionAboveItAndStopsEarly) {
  const auto process = toy_process(ToyNoise::masked);
  auto run = [&](int64_t steps, double threshold, std::vector<int64_t>* traced) {
    DiffusionSampleOptions options;
    options.steps = steps;
    options.method = DiffusionMethod::confidence;
    options.confidence_threshold = threshold;
    options.seed = 4;
    options.trace_every = 1;
    options.on_trace = [traced](int64_t step, const torch::Tensor&) {
      if (traced) traced->push_back(step);
    };
    return sample_diffusion(constant_denoiser(), process, free_canvas(3, 7), options, torch::kCPU).tokens;
  };
  std::vector<int64_t> traced;
  const auto early = run(6, 0.6, &traced);
  EXPECT_EQ(traced, (std::vector<int64_t>{1}));
  EXPECT_TRUE(early.equal(run(1, 0, nullptr)));
  traced.clear();
  const auto scheduled = run(6, 0.7, &traced);
  EXPECT_EQ(traced, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(scheduled.equal(run(6, 0, nullptr)));

  DiffusionSampleOptions ancestral;
  ancestral.confidence_threshold = 0.5;
  const std::string refusal = testing::input_error_of(
      [&] { sample_diffusion(constant_denoiser(), process, free_canvas(1, 3), ancestral, torch::kCPU); });
  EXPECT_EQ(refusal, "sample.confidence_threshold = 0.5 needs the confidence or adaptive sampler "
                     "(sample.diffusion_sampler); ancestral steps commit no positions");
}

TEST(DiffusionSampler, GreedyNoiseRemovalTakesTheArgmax) {
  DiffusionSampleOptions options;
  options.steps = 4;
  options.noise_removal = NoiseRemoval::greedy;
  const auto z = sample_diffusion(constant_denoiser(), toy_process(ToyNoise::uniform), free_canvas(3, 8),
                                  options, torch::kCPU).tokens;
  EXPECT_TRUE(z.eq(2).all().item<bool>());
}

TEST(DiffusionSampler, RunsATimeConditionedModel) {
  const ModelConfig c = testing::tiny_model_config(/*init_std=*/0.02, /*time_conditioning=*/true);
  torch::manual_seed(1);
  auto model = build_language_model(c, 7);
  DiffusionSampleOptions options;
  options.steps = 4;
  const DiffusionProcess process = toy_process(ToyNoise::uniform, true);
  const auto result =
      sample_diffusion(model_denoiser(model, process), process, free_canvas(2, 12), options, torch::kCPU);
  EXPECT_EQ(result.model_calls, options.steps + 1);
  EXPECT_TRUE(result.tokens.lt(5).all().item<bool>());
}

// A model trained with diffusion.shifted_outputs is read as it trained: position i's logits are the output at i − 1.
TEST(DiffusionSampler, ShiftedOutputsReadTheLogitsOnePositionOn) {
  torch::manual_seed(2);
  auto model = build_language_model(testing::tiny_model_config(/*init_std=*/0.2), 7);
  DiffusionProcess process = toy_process(ToyNoise::uniform);
  const auto z = torch::randint(0, 5, {2, 6}, torch::kLong);
  const auto sigma = torch::ones({2});
  torch::NoGradGuard no_grad;
  const auto plain = model_denoiser(model, process)(z, sigma);
  process.shifted_outputs = true;
  const auto shifted = model_denoiser(model, process)(z, sigma);
  EXPECT_TRUE(shifted.narrow(1, 1, 5).equal(plain.narrow(1, 0, 5)));
  EXPECT_TRUE(shifted.narrow(1, 0, 1).equal(plain.narrow(1, 0, 1)));
}

TEST(DiffusionCanvas, InfillTemplateMarksGeneratedPositions) {
  ByteTokenizer tokenizer;
  const auto row = infill_row("ab{{3}}c{{2}}", tokenizer);
  EXPECT_EQ(row.tokens.size(), 8u);
  EXPECT_EQ(row.fixed, (std::vector<bool>{true, true, false, false, false, true, false, false}));
  EXPECT_EQ(row.tokens[0], 'a');
  EXPECT_EQ(row.tokens[5], 'c');
  EXPECT_THROW(infill_row("no placeholder", tokenizer), InputError);
  EXPECT_THROW(infill_row("zero {{0}}", tokenizer), InputError);
  EXPECT_THROW(infill_row("huge {{99999999999999999999}}", tokenizer), InputError);  // 20 digits: no stoll overflow

  const auto canvas = make_canvas({prefix_row({7, 8}, 2), row}, 2);
  EXPECT_EQ(canvas.tokens.sizes(), (torch::IntArrayRef{4, 8}));
  EXPECT_EQ(canvas.fixed[0].sum().item<int64_t>(), 2);  // the short layout is extended with generated positions
  EXPECT_EQ(canvas.tokens[1][1].item<int64_t>(), 8);
}

TEST(DiffusionSampler, UnigramEntropyOfAHistogram) {
  EXPECT_NEAR(unigram_entropy({1, 1, 2, 3}), -(0.5 * std::log(0.5) + 2 * 0.25 * std::log(0.25)), 1e-15);
  EXPECT_EQ(unigram_entropy({4, 4, 4}), 0.0);
}

}  // namespace
}  // namespace inkstone
