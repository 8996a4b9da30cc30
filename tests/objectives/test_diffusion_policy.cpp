// A diffusion model as an RL policy (objectives/diffusion_policy.h): the ELBO estimate is unbiased for the NELBO the
// objective trains (an exact expectation over the noise, the time integral taken numerically in float64, against
// the mean of many keyed estimates), the one-step estimate is the model's log-probability of the completion from
// the fully noised canvas, and a row's draws depend on its key alone, so ratios of two scorings are coupled.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dataset/byte_tokenizer.h"
#include "objectives/diffusion_objective.h"
#include "objectives/diffusion_policy.h"
#include "objectives/masked_noise.h"
#include "objectives/uniform_noise.h"
#include "tests/objectives/diffusion_fixtures.h"

namespace inkstone {
namespace {

using testing::randomise;
using testing::tiny_config;

const std::vector<int64_t> kPrompt = {'1', '+', '2'};

Config policy_config(const std::string& objective, bool time_conditioning, SequenceLikelihood likelihood,
                     int64_t samples) {
  Config config = tiny_config(objective, time_conditioning);
  config.objective.name = "gflowrl";
  config.rl.policy = objective;
  config.rl.likelihood = likelihood;
  config.rl.elbo_samples = samples;
  return config;
}

// `rows` copies of prompt + completion, keyed 0..rows−1.
Batch completion_rows(const std::vector<int64_t>& completion, int64_t rows) {
  std::vector<int64_t> ids = kPrompt;
  ids.insert(ids.end(), completion.begin(), completion.end());
  const auto width = static_cast<int64_t>(ids.size());
  Batch batch;
  batch.tokens = torch::tensor(ids, torch::kLong).unsqueeze(0).repeat({rows, 1});
  batch.real = torch::ones({rows, width}, torch::kBool);
  batch.rollout.policy = torch::zeros({rows, width}, torch::kBool);
  batch.rollout.policy.narrow(1, static_cast<int64_t>(kPrompt.size()), static_cast<int64_t>(completion.size()))
      .fill_(true);
  batch.rollout.noise_keys = torch::arange(rows, torch::kLong);
  return batch;
}

// Every noisy completion with nonzero probability: each position keeps its token or becomes the mask (masked
// noise), or takes any support id (uniform noise).
std::vector<std::vector<int64_t>> noisy_completions(const std::vector<int64_t>& completion, const NoiseProcess& noise,
                                                    int64_t support, int64_t mask) {
  std::vector<std::vector<int64_t>> out = {{}};
  for (int64_t x : completion) {
    std::vector<int64_t> candidates;
    if (noise.spreads()) {
      for (int64_t v = 0; v < support - 1; ++v) candidates.push_back(v);  // bytes
      candidates.push_back(ByteTokenizer().specials().eos);
    } else {
      candidates = {x};
    }
    if (noise.masks()) candidates.push_back(mask);
    std::vector<std::vector<int64_t>> longer;
    for (const auto& prefix : out)
      for (int64_t v : candidates) {
        longer.push_back(prefix);
        longer.back().push_back(v);
      }
    out = longer;
  }
  return out;
}

// E_{t ~ U[t_min, 1]} E_{z ~ q_t(· | y)} Σ_i ℓ_i(z, t), the completion's NELBO given the prompt: z enumerated with
// its forward probability Π_i q_t(z_i | y_i) = α [z_i = y_i] + μ [z_i = m] + υ/N [z_i ∈ S] in float64, and the t
// integral by the midpoint rule in s with t = t_min^(1 − s), dt = −log(t_min) t ds, which flattens the integrand's
// 1/t growth near t_min. ℓ is the objective's own per-token term (checked against float64 oracles in
// test_noise_processes.cpp); only the Monte-Carlo estimate's draws are under test.
double exact_nelbo(const DiffusionObjective& objective, LanguageModelImpl& model, const std::vector<int64_t>& completion,
                   double t_min, int64_t nodes) {
  const NoiseProcess& noise = *objective.noise();
  const int64_t support = objective.support().size();
  const int64_t mask = ByteTokenizer().specials().mask;
  const auto noisy = noisy_completions(completion, noise, support, mask);
  const auto rows = static_cast<int64_t>(noisy.size());
  Batch batch = completion_rows(completion, rows);
  batch.loss_mask = batch.rollout.policy;
  auto z = batch.tokens.clone();
  for (int64_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < completion.size(); ++i)
      z[r][static_cast<int64_t>(kPrompt.size() + i)] = noisy[static_cast<size_t>(r)][i];
  torch::NoGradGuard no_grad;
  double integral = 0;
  for (int64_t j = 0; j < nodes; ++j) {
    const double s = (static_cast<double>(j) + 0.5) / static_cast<double>(nodes);
    const double t = std::pow(t_min, 1.0 - s);
    const NoiseLevelsAt at = noise.levels_at(t);
    const auto nelbo = objective.score(model, batch, torch::full({rows, 1}, t, torch::kFloat), z).nelbo;
    const auto per_row = nelbo.to(torch::kDouble).sum(1);
    double expectation = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double probability = 1;
      for (size_t i = 0; i < completion.size(); ++i) {
        const int64_t v = noisy[static_cast<size_t>(r)][i];
        probability *= (v == completion[i] ? at.keep : 0.0) + (v == mask ? at.mask : 0.0) +
                       (v != mask ? at.uniform / static_cast<double>(support) : 0.0);
      }
      expectation += probability * per_row[r].item<double>();
    }
    integral += expectation * t;
  }
  return integral * -std::log(t_min) / static_cast<double>(nodes) / (1.0 - t_min);
}

void expect_unbiased(const std::string& objective_name, bool time_conditioning, const std::vector<int64_t>& completion) {
  const Config config = policy_config(objective_name, time_conditioning, SequenceLikelihood::elbo, 4);
  const ByteTokenizer tokenizer;
  torch::manual_seed(3);
  auto model = build_language_model(config.model, tokenizer.vocab_size());
  randomise(*model);
  Config trained = config;
  trained.objective.name = objective_name;
  std::shared_ptr<const NoiseProcess> noise;
  if (objective_name == "masked_diffusion") noise = std::make_shared<MaskedNoise>(config.diffusion);
  else noise = std::make_shared<UniformNoise>(config.diffusion);
  const DiffusionObjective objective(trained, tokenizer, noise);
  const double oracle = exact_nelbo(objective, *model, completion, config.diffusion.t_min, 400);

  const DiffusionPolicy policy(config, tokenizer, noise);
  constexpr int64_t kRows = 1024;
  torch::NoGradGuard no_grad;
  const auto estimates = policy.log_probs(*model, completion_rows(completion, kRows), false, false)
                             .log_probs.to(torch::kDouble).sum(1);
  const double mean = estimates.mean().item<double>();
  const double standard_error = estimates.std().item<double>() / std::sqrt(static_cast<double>(kRows));
  EXPECT_GT(standard_error, 0.0);
  EXPECT_LT(standard_error, 0.05 * oracle);  // a bound tight enough to see a bias of a few percent
  // The estimate is of the ELBO = −NELBO: within 4 standard errors of the exact value.
  EXPECT_NEAR(-mean, oracle, 4 * standard_error) << objective_name << ": oracle NELBO " << oracle;
}

TEST(DiffusionPolicy, ElboEstimateIsUnbiasedForTheMaskedNelbo) {
  expect_unbiased("masked_diffusion", /*time_conditioning=*/false, {'3', '\n', 257});
}

TEST(DiffusionPolicy, ElboEstimateIsUnbiasedForTheUniformNelboOfATimeConditionedModel) {
  expect_unbiased("uniform_diffusion", /*time_conditioning=*/true, {'3'});
}

// d1's estimate with no prompt noise: the completion all mask, log x̂ at each completion token from one forward.
TEST(DiffusionPolicy, OneStepIsTheLogProbabilityFromTheFullyMaskedCompletion) {
  Config config = policy_config("masked_diffusion", false, SequenceLikelihood::one_step, 1);
  config.rl.prompt_mask = 0;
  const ByteTokenizer tokenizer;
  torch::manual_seed(4);
  auto model = build_language_model(config.model, tokenizer.vocab_size());
  randomise(*model);
  const DiffusionPolicy policy(config, tokenizer, std::make_shared<MaskedNoise>(config.diffusion));
  const Batch batch = completion_rows({'3', '4'}, 2);
  torch::NoGradGuard no_grad;
  const auto scored = policy.log_probs(*model, batch, false, false).log_probs;

  auto z = batch.tokens.clone();
  z.narrow(1, 3, 2).fill_(tokenizer.specials().mask);
  WindowInputs window;
  window.mask = MaskMode::bidirectional;
  const auto ids = torch::arange(tokenizer.vocab_size());
  const auto support = ids.lt(256) | ids.eq(tokenizer.specials().eos);  // the bytes and eos
  const auto log_x_hat = torch::log_softmax(model->forward(z, window).to(torch::kDouble).masked_fill(~support, -INFINITY), -1);
  for (int64_t row = 0; row < 2; ++row) {
    EXPECT_EQ(scored[row][0].item<double>(), 0.0);  // the prompt scores nothing
    for (int64_t i = 3; i < 5; ++i)
      EXPECT_NEAR(scored[row][i].item<double>(), log_x_hat[row][i][batch.tokens[row][i]].item<double>(), 1e-5);
  }
}

// d1 noises each prompt token with probability rl.prompt_mask; the completion always.
TEST(DiffusionPolicy, OneStepNoisesTheCompletionAndAShareOfThePrompt) {
  Config config = policy_config("masked_diffusion", false, SequenceLikelihood::one_step, 1);
  config.rl.prompt_mask = 0.3;
  const ByteTokenizer tokenizer;
  const DiffusionPolicy policy(config, tokenizer, std::make_shared<MaskedNoise>(config.diffusion));
  constexpr int64_t kRows = 2000;
  const auto draws = policy.draw(completion_rows({'3'}, kRows));
  const auto masked = draws.z.eq(tokenizer.specials().mask);
  EXPECT_TRUE(masked.select(1, 3).all().item<bool>());
  const double share = masked.narrow(1, 0, 3).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(share, 0.3, 4 * std::sqrt(0.3 * 0.7 / (3.0 * kRows)));
  EXPECT_TRUE((draws.t == 1.0f).all().item<bool>());
}

// A row's noise depends on its key alone: the same rows scored twice give the same values bit for bit (ratios of
// 1 at the first mini-batch), a mini-batch of them the same draws and values, and the K times of a row are
// stratified (one in each of K equal strata of [t_min, 1]).
TEST(DiffusionPolicy, DrawsAreKeyedByRowSoScoringsAreCoupled) {
  const Config config = policy_config("uniform_diffusion", false, SequenceLikelihood::elbo, 4);
  const ByteTokenizer tokenizer;
  torch::manual_seed(6);
  auto model = build_language_model(config.model, tokenizer.vocab_size());
  randomise(*model);
  const DiffusionPolicy policy(config, tokenizer, std::make_shared<UniformNoise>(config.diffusion));
  Batch batch = completion_rows({'3', '4', '5'}, 6);
  batch.rollout.noise_keys = torch::tensor({11, 12, 13, 14, 15, 16}, torch::kLong);
  const auto first = policy.log_probs(*model, batch, false, false).log_probs;
  const auto again = policy.log_probs(*model, batch, false, false).log_probs;
  EXPECT_TRUE(torch::equal(first, again));

  Batch part;
  const auto rows = torch::tensor({4, 1}, torch::kLong);
  part.tokens = batch.tokens.index_select(0, rows);
  part.real = batch.real.index_select(0, rows);
  part.rollout.policy = batch.rollout.policy.index_select(0, rows);
  part.rollout.noise_keys = batch.rollout.noise_keys.index_select(0, rows);
  const auto whole_draws = policy.draw(batch), part_draws = policy.draw(part);
  const auto copies = torch::tensor({16, 17, 18, 19, 4, 5, 6, 7}, torch::kLong);  // rows 4 and 1, K = 4 each
  EXPECT_TRUE(torch::equal(part_draws.z, whole_draws.z.index_select(0, copies)));
  EXPECT_TRUE(torch::equal(part_draws.t, whole_draws.t.index_select(0, copies)));
  EXPECT_TRUE(torch::allclose(policy.log_probs(*model, part, false, false).log_probs, first.index_select(0, rows),
                              1e-5, 1e-6));

  const auto t = whole_draws.t.view({6, 4}).to(torch::kDouble);
  const auto stratum = ((t - config.diffusion.t_min) / (1 - config.diffusion.t_min) * 4).floor();
  EXPECT_TRUE(torch::equal(stratum, torch::arange(4, torch::kDouble).expand({6, 4})));
  EXPECT_FALSE(torch::equal(t[0], t[1]));  // each row its own offset
}

}  // namespace
}  // namespace inkstone
