// Diffusion objectives: the uniform NELBO against the vectors of docs/diffusion.md, "Test vectors", its KL form and
// the discrete-time limit; the masked NELBO; time sampling and weighting; both objectives on a tiny model and in the
// trainer.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "core/errors.h"
#include "dataset/byte_tokenizer.h"
#include "dataset/data_prepare.h"
#include "objectives/diffusion_objective.h"
#include "objectives/diffusion_time.h"
#include "objectives/masked_noise.h"
#include "objectives/uniform_noise.h"
#include "tests/fixtures.h"
#include "tests/objectives/diffusion_fixtures.h"
#include "tests/test_paths.h"
#include "train/session.h"
#include "train/window_source.h"

namespace inkstone {
namespace {
using testing::random_batch;
using testing::randomise;
using testing::tiny_config;

constexpr double kInf = std::numeric_limits<double>::infinity();

torch::Tensor scalar(double value) { return torch::full({}, value, torch::kDouble); }
torch::Tensor id(int64_t value) { return torch::full({}, value, torch::kLong); }

// The setup of docs/diffusion.md, "Test vectors": N = 5 and these logits.
torch::Tensor reference_log_x_hat() {
  return torch::log_softmax(torch::tensor({0.3, -1.2, 2.0, 0.1, -0.5}, torch::kDouble), -1);
}

// The test vectors use ε = 0 log-linear: α = 1 − t, α' = −1.
double closed_form_at(const torch::Tensor& log_x_hat, int64_t x, int64_t z, double t, int64_t support_size) {
  return uniform_nelbo_per_token(log_x_hat, id(x), id(z), scalar(1.0 - t), scalar(-1.0), support_size)
      .item<double>();
}

struct VectorRow {
  double t;
  int64_t x, z;
  double loss;
};
const VectorRow kVectors[] = {{0.3, 2, 2, 0.0655514504},
                              {0.3, 2, 4, 1.0394848828},
                              {0.7, 0, 0, 1.1969432679},
                              {0.7, 0, 3, 1.1373385784},
                              {0.95, 1, 2, 0.4580074934}};

TEST(UniformNelbo, ClosedAndKlFormsMatchTheTestVectors) {
  const auto log_x_hat = reference_log_x_hat();
  EXPECT_NEAR(log_x_hat.exp()[2].item<double>(), 0.687238299456, 1e-12);
  for (const auto& row : kVectors) {
    SCOPED_TRACE(::testing::Message() << "t " << row.t << " x " << row.x << " z " << row.z);
    EXPECT_NEAR(closed_form_at(log_x_hat, row.x, row.z, row.t, 5), row.loss, 1e-9);
    EXPECT_NEAR(uniform_nelbo_kl_form(log_x_hat.exp(), row.x, row.z, 1.0 - row.t, -1.0), row.loss, 1e-9);
  }
}

TEST(UniformNelbo, IdsOutsideTheSupportDoNotChangeTheLoss) {
  // The same five categories at ids {0, 2, 3, 5, 6} of a vocabulary of 8; the other ids are at −inf.
  const std::vector<int64_t> ids = {0, 2, 3, 5, 6};
  auto log_x_hat = torch::full({8}, -kInf, torch::kDouble);
  log_x_hat.index_put_({torch::tensor(ids)}, reference_log_x_hat());
  for (const auto& row : kVectors)
    EXPECT_NEAR(closed_form_at(log_x_hat, ids[row.x], ids[row.z], row.t, 5), row.loss, 1e-9);
}

// q(z_s | z_t, v) for a clean-token distribution v (one-hot for the data, x̂ for the model): Bayes with the
// transition q(z_t | z_s) = α_{t|s} e_{z_s} + (1 − α_{t|s})/N and the marginal q_s(z_s | v) (docs/diffusion.md,
// "Uniform noise").
torch::Tensor bayes_posterior(const torch::Tensor& v, int64_t z_t, double alpha_t, double alpha_s) {
  const double n = static_cast<double>(v.numel());
  const double alpha_ts = alpha_t / alpha_s;
  auto transition = torch::full({v.numel()}, (1.0 - alpha_ts) / n, torch::kDouble);
  transition[z_t] += alpha_ts;
  auto joint = transition * (alpha_s * v + (1.0 - alpha_s) / n);
  return joint / joint.sum();
}

TEST(UniformNelbo, DiscreteTimeLimitAgrees) {
  // T · KL(q(z_s | z_t, x) ‖ q(z_s | z_t, x̂)) with s = t − 1/T tends to ℓ (docs/diffusion.md,
  // "Discrete-time check"). The gap is first order, up to 3.2/T on these rows (so 3.2e-5 at T = 1e5 on the t = 0.95
  // row, hence the bound 3.5/T).
  const auto x_hat = reference_log_x_hat().exp();
  for (double steps : {1e5, 1e6}) {
    for (const auto& row : kVectors) {
      const double alpha_t = 1.0 - row.t, alpha_s = 1.0 - (row.t - 1.0 / steps);
      auto data = bayes_posterior(torch::one_hot(id(row.x), 5).to(torch::kDouble), row.z, alpha_t, alpha_s);
      auto model = bayes_posterior(x_hat, row.z, alpha_t, alpha_s);
      const double d3pm = steps * (data * (data.log() - model.log())).sum().item<double>();
      EXPECT_NEAR(d3pm, row.loss, 3.5 / steps) << "T " << steps << " t " << row.t << " x " << row.x << " z " << row.z;
    }
  }
}

TEST(UniformNelbo, ClosedFormEqualsKlFormAtRealisticVocabulary) {
  torch::manual_seed(11);
  const int64_t n = 50000;
  const double eps = 1e-3;  // log-linear: α' = −(1 − ε), not −1 (docs/diffusion.md, "Pitfalls")
  const auto log_x_hat = torch::log_softmax(3.0 * torch::randn({n}, torch::kDouble), -1);
  for (double t : {1e-3, 0.05, 0.5, 0.999}) {
    const double alpha = 1.0 - (1.0 - eps) * t;
    for (int64_t x : {int64_t{7}, int64_t{31337}}) {
      for (int64_t z : {x, int64_t{4242}}) {
        SCOPED_TRACE(::testing::Message() << "t " << t << " x " << x << " z " << z);
        const double closed = uniform_nelbo_per_token(log_x_hat, id(x), id(z), scalar(alpha), scalar(-(1.0 - eps)), n)
                                  .item<double>();
        const double kl = uniform_nelbo_kl_form(log_x_hat.exp(), x, z, alpha, -(1.0 - eps));
        EXPECT_NEAR(closed, kl, 1e-9 * std::abs(kl));
      }
    }
  }
}

TEST(UniformNelbo, Float32StaysCloseToFloat64AtRealisticVocabulary) {
  // Training computes the loss in fp32 (docs/diffusion.md, "Precision"): the N-term sum S and the 1/t-sized terms
  // must not lose it.
  torch::manual_seed(12);
  const int64_t n = 50000, rows = 64;
  const auto log_x_hat = torch::log_softmax(3.0 * torch::randn({rows, n}, torch::kDouble), -1);
  const auto x = torch::randint(n, {rows}, torch::kLong);
  const auto z = torch::where(torch::arange(rows) % 2 == 0, x, torch::randint(n, {rows}, torch::kLong));
  const auto alpha = 1.0 - (1.0 - 1e-3) * torch::logspace(-3, 0, rows, 10.0, torch::kDouble);
  const auto alpha_prime = torch::full({rows}, -(1.0 - 1e-3), torch::kDouble);
  const auto exact = uniform_nelbo_per_token(log_x_hat, x, z, alpha, alpha_prime, n);
  const auto fp32 = uniform_nelbo_per_token(log_x_hat.to(torch::kFloat), x, z, alpha.to(torch::kFloat),
                                            alpha_prime.to(torch::kFloat), n);
  EXPECT_EQ(fp32.scalar_type(), torch::kFloat);
  EXPECT_LE(((fp32.to(torch::kDouble) - exact).abs() / exact.abs()).max().item<double>(), 1e-3);
}

TEST(UniformNelbo, PerfectModelScoresZero) {
  for (double t : {1e-3, 0.3, 0.9}) {
    for (int64_t z : {1, 3}) {
      auto log_x_hat = torch::full({5}, -kInf, torch::kDouble);
      log_x_hat[3] = 0.0;  // x̂ = e_x
      // Zero is reached by cancelling terms as large as (log c)/c ~ N/t: float64 leaves ~1e-15/t.
      EXPECT_NEAR(closed_form_at(log_x_hat, 3, z, t, 5), 0.0, 1e-14 / t) << "t " << t << " z " << z;
      // The same through large logits in fp32, as the model would give it; fp32 leaves ~1e-6/t.
      auto logits = torch::zeros({5}, torch::kFloat);
      logits[3] = 100.0;
      const double fp32 = uniform_nelbo_per_token(torch::log_softmax(logits, -1), id(3), id(z),
                                                  scalar(1.0 - t).to(torch::kFloat), scalar(-1.0).to(torch::kFloat), 5)
                              .item<double>();
      EXPECT_NEAR(fp32, 0.0, 2e-6 / t) << "t " << t << " z " << z;
    }
  }
}

TEST(UniformNelbo, NonNegativeOnRandomLogits) {
  torch::manual_seed(13);
  for (int64_t n : {3, 7, 1000}) {
    const int64_t rows = 2000;
    const auto log_x_hat = torch::log_softmax(4.0 * torch::randn({rows, n}, torch::kDouble), -1);
    const auto x = torch::randint(n, {rows}, torch::kLong);
    const auto z = torch::where(torch::rand({rows}) < 0.5, x, torch::randint(n, {rows}, torch::kLong));
    const auto alpha = 1e-3 + (1.0 - 2e-3) * torch::rand({rows}, torch::kDouble);
    const auto loss = uniform_nelbo_per_token(log_x_hat, x, z, alpha, -torch::ones({rows}, torch::kDouble), n);
    EXPECT_TRUE(loss.isfinite().all().item<bool>()) << "N " << n;
    EXPECT_GE(loss.min().item<double>(), -1e-10) << "N " << n;
  }
}

TEST(MaskedNelbo, MatchesHandComputedExample) {
  // Mask id 4; SUBS puts its logit at −inf, so x̂ = softmax([0.3, −1.2, 2.0, 0.1]) and the mask's own logit
  // (here 5) must not matter. t = 0.3 with α = 1 − t: the weight −α'/(1 − α) is 1/0.3.
  auto logits = torch::tensor({0.3, -1.2, 2.0, 0.1, 5.0}, torch::kDouble).repeat({3, 1});
  logits.index_put_({torch::indexing::Slice(), 4}, -kInf);
  const auto log_x_hat = torch::log_softmax(logits, -1);
  const auto x = torch::tensor({2, 0, 3}, torch::kLong);
  const auto z = torch::tensor({4, 0, 4}, torch::kLong);  // positions 0 and 2 masked
  const auto loss = masked_nelbo_per_token(log_x_hat, x, z, 4, scalar(0.7), scalar(-1.0));
  // −log x̂_2 / 0.3 and −log x̂_3 / 0.3 with x̂ = [0.13305288791638, 0.02968811218899, 0.72832450877165,
  // 0.10893449112298].
  EXPECT_NEAR(loss[0].item<double>(), 1.0566952543231984, 1e-12);
  EXPECT_EQ(loss[1].item<double>(), 0.0);
  EXPECT_NEAR(loss[2].item<double>(), 7.3900285876565315, 1e-12);
}

TEST(DiffusionTime, StratifiedDrawsFillEachStratumOnceAcrossMicroBatches) {
  torch::manual_seed(21);
  // A step batch of 8 draws handed out as micro-batches of 3, 3 and 2.
  const auto u = torch::cat({stratified_uniform(0, 3, 8, torch::kCPU), stratified_uniform(3, 3, 8, torch::kCPU),
                             stratified_uniform(6, 2, 8, torch::kCPU)});
  EXPECT_TRUE((u * 8).floor().to(torch::kLong).equal(torch::arange(8)));
  EXPECT_TRUE((u >= 0).all().item<bool>() && (u < 1).all().item<bool>());
}

TEST(DiffusionTime, TrainingTimesAreStratifiedAndAffineMapped) {
  DiffusionConfig config = default_config().diffusion;
  config.t_min = 0.01;
  torch::manual_seed(22);
  // Rows 2..3 of a step batch of 4, one t per token over 5 tokens: draws 10..19 of 20.
  config.time_mix = 1.0;
  const auto drawn = sample_training_time(config, 2, 5, 2, 4, torch::kCPU);
  ASSERT_EQ(drawn.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(drawn.scalar_type(), torch::kFloat);
  const auto t = drawn.to(torch::kDouble);
  const auto position = (t - config.t_min) / (1.0 - config.t_min) * 20.0 - torch::arange(10, 20).view({2, 5});
  EXPECT_GE(position.min().item<double>(), -1e-5);
  EXPECT_LE(position.max().item<double>(), 1.0 + 1e-5);

  config.time_sampling = TimeSampling::iid;
  config.time_mix = 0.0;
  const auto iid = sample_training_time(config, 64, 1, 0, 0, torch::kCPU);
  ASSERT_EQ(iid.sizes(), (std::vector<int64_t>{64, 1}));
  EXPECT_GE(iid.min().item<double>(), config.t_min);
  EXPECT_LE(iid.max().item<double>(), 1.0);
}

TEST(DiffusionTime, EvalGridIsTheStratumMidpoints) {
  const auto t = eval_time_grid(1e-3, 4).to(torch::kDouble).view({4});
  for (int64_t i = 0; i < 4; ++i) EXPECT_NEAR(t[i].item<double>(), 1e-3 + (1 - 1e-3) * (i + 0.5) / 4, 1e-7);
}

TEST(DiffusionWeight, SnrDividesTheElboByTheLogSnrRateAndMaxWeightClipsIt) {
  DiffusionConfig config = default_config().diffusion;  // log-linear, ε = 1e-3
  const auto schedule = make_noise_schedule(config);
  const UniformNoise noise(config);
  const auto t = torch::linspace(0.005, 1.0, 9, torch::kDouble);
  const auto alpha = schedule->alpha(t);
  const auto rate = schedule->alpha_prime(t) / (alpha * (1.0 - alpha));  // dλ/dt

  EXPECT_TRUE(training_weight(noise, config, t).allclose(torch::ones_like(t), 0, 1e-12));
  config.weighting = LossWeighting::snr;
  EXPECT_TRUE(training_weight(noise, config, t)
                  .allclose(alpha * (1.0 - alpha) / -schedule->alpha_prime(t), 1e-12, 0));
  config.weighting = LossWeighting::elbo;
  config.max_weight = 20.0;
  const auto clipped = training_weight(noise, config, t);
  EXPECT_TRUE(clipped.allclose(torch::clamp_max(20.0 / rate.abs(), 1.0), 1e-12, 0));
  EXPECT_LT(clipped.min().item<double>(), 0.3);  // t = 0.005 and t = 1 both have |dλ/dt| > 20
  EXPECT_EQ(clipped[4].item<double>(), 1.0);
}

TEST(DiffusionObjective, ScoresAreTheClosedFormOfTheModelsLogitsAtSigma) {
  torch::manual_seed(31);
  const Config config = tiny_config("uniform_diffusion", true);
  DiffusionObjective objective(config, ByteTokenizer(), std::make_shared<UniformNoise>(config.diffusion));
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  const Batch batch = random_batch(3, 12);
  const auto t = torch::tensor({0.02f, 0.4f, 0.9f}).view({3, 1});
  const auto alpha = objective.schedule().alpha(t);
  const auto z = torch::where(batch.real, objective.corrupt(batch.tokens, t, nullptr), batch.tokens);
  const auto scores = objective.score(*model, batch, t, z);

  WindowInputs args;
  args.mask = MaskMode::bidirectional;
  args.noise_level = -torch::log(alpha.view({3}));
  const auto logits = model->forward(z, args).to(torch::kDouble);
  const auto log_x_hat = torch::log_softmax(objective.support().restrict_logits(logits), -1);
  const auto expected = uniform_nelbo_per_token(log_x_hat, batch.tokens, z, alpha.to(torch::kDouble),
                                                objective.schedule().alpha_prime(t).to(torch::kDouble), 257)
                            .masked_fill(~batch.real, 0.0);
  EXPECT_TRUE(scores.nelbo.to(torch::kDouble).allclose(expected, 1e-4, 1e-5));
  EXPECT_EQ(scores.nelbo.index({2, torch::indexing::Slice(9)}).abs().sum().item<double>(), 0.0);  // padding
  EXPECT_TRUE(scores.corrupted.equal(z.ne(batch.tokens)));
  EXPECT_GT(scores.corrupted.sum().item<int64_t>(), 0);
  EXPECT_TRUE(scores.weighted.equal(scores.nelbo * training_weight(*objective.noise(), config.diffusion, t)));
}

TEST(DiffusionObjective, SameLossWithAndWithoutTimeInputForIdenticalLogits) {
  // An adaLN-Zero model gives logits 0 at init (docs/diffusion.md, "Time conditioning"); a plain model with a
  // zeroed head gives the same.
  torch::manual_seed(32);
  const Config with_time = tiny_config("uniform_diffusion", true);
  const Config without_time = tiny_config("uniform_diffusion", false);
  DiffusionObjective objective_a(with_time, ByteTokenizer(), std::make_shared<UniformNoise>(with_time.diffusion));
  DiffusionObjective objective_b(without_time, ByteTokenizer(), std::make_shared<UniformNoise>(without_time.diffusion));
  EXPECT_TRUE(objective_a.needs().time_input);
  EXPECT_FALSE(objective_b.needs().time_input);
  auto model_a = build_language_model(with_time.model, 260);
  auto model_b = build_language_model(without_time.model, 260);
  {
    torch::NoGradGuard no_grad;
    model_b->head->weight.zero_();
  }
  const Batch batch = random_batch(2, 10);
  const auto t = torch::tensor({0.25f, 0.75f}).view({2, 1});
  const auto z = objective_a.corrupt(batch.tokens, t, nullptr);
  const auto a = objective_a.score(*model_a, batch, t, z).nelbo;
  const auto b = objective_b.score(*model_b, batch, t, z).nelbo;
  EXPECT_TRUE(a.allclose(b, 0, 1e-6));

  // Logits 0 mean x̂ uniform over the support.
  const auto zeros = torch::zeros({260}, torch::kDouble);
  const auto uniform = torch::log_softmax(objective_a.support().restrict_logits(zeros), -1);
  const auto alpha = objective_a.schedule().alpha(t).to(torch::kDouble);
  const auto expected = uniform_nelbo_per_token(uniform.expand({2, 10, 260}), batch.tokens, z, alpha,
                                                objective_a.schedule().alpha_prime(t).to(torch::kDouble), 257)
                            .masked_fill(~batch.real, 0.0);
  EXPECT_TRUE(a.to(torch::kDouble).allclose(expected, 1e-4, 1e-5));
}

TEST(DiffusionObjective, LossOnATinyModelIsFiniteNonNegativeAndHasAGradient) {
  for (const std::string name : {"uniform_diffusion", "masked_diffusion", "mixture_diffusion"}) {
    for (bool time_conditioning : {false, true}) {
      SCOPED_TRACE(name + (time_conditioning ? " with time input" : " without time input"));
      torch::manual_seed(33);
      const Config config = tiny_config(name, time_conditioning);
      auto objective = make_objective(config, ByteTokenizer());
      EXPECT_EQ(objective->name(), name);
      EXPECT_EQ(objective->needs().mask, MaskMode::bidirectional);
      EXPECT_EQ(objective->needs().window_extra, 0);
      auto model = build_language_model(config.model, 260);
      const Batch batch = random_batch(4, 16);
      LossOutput out = objective->loss(*model, batch);
      EXPECT_EQ(out.count.item<double>(), 4 * 16 - 3);
      const double loss = out.loss_sum.item<double>();
      EXPECT_TRUE(std::isfinite(loss));
      EXPECT_GE(loss, 0.0);
      EXPECT_DOUBLE_EQ(out.metric_sums.at("nelbo").item<double>(), loss);  // elbo weighting
      EXPECT_GT(out.metric_sums.at("corrupted_fraction").item<double>(), 0.0);
      out.loss_sum.backward();
      double grad = 0;
      for (const auto& p : model->parameters())
        if (p.grad().defined()) grad += p.grad().abs().sum().item<double>();
      EXPECT_GT(grad, 0.0);
      EXPECT_TRUE(std::isfinite(grad));
    }
  }
}

TEST(DiffusionObjective, PerTokenTimeAndSnrWeightingTrain) {
  torch::manual_seed(34);
  const Config config =
      tiny_config("uniform_diffusion", false, {"diffusion.time_mix=1.0", "diffusion.weighting=\"snr\""});
  auto objective = make_objective(config, ByteTokenizer());
  auto model = build_language_model(config.model, 260);
  LossOutput out = objective->loss(*model, random_batch(4, 16));
  // α(1 − α)/(−α') ≤ 1/4 (1 − ε)⁻¹, so the SNR-weighted loss is far below the ELBO.
  EXPECT_LT(out.loss_sum.item<double>(), 0.26 * out.metric_sums.at("nelbo").item<double>());
  EXPECT_GT(out.loss_sum.item<double>(), 0.0);
}

TEST(DiffusionObjective, CleanTokensOutsideTheSupportAreNamed) {
  const Config config = tiny_config("uniform_diffusion", false);
  auto objective = make_objective(config, ByteTokenizer());
  auto model = build_language_model(config.model, 260);
  Batch batch = random_batch(2, 8);
  batch.tokens[0][3] = ByteTokenizer().specials().bos;  // 256: a special outside the default support
  try {
    objective->loss(*model, batch);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("clean token id 256"), std::string::npos) << e.what();
  }
}

// A fixed list of random batches.
class FixedEvalSource : public EvalSource {
 public:
  explicit FixedEvalSource(int64_t batches) {
    torch::manual_seed(41);
    for (int64_t i = 0; i < batches; ++i) batches_.push_back(random_batch(3, 16));
  }
  int64_t num_batches() const override { return static_cast<int64_t>(batches_.size()); }
  Batch batch(int64_t index) const override { return batches_[static_cast<size_t>(index)]; }
  double bytes_per_token() const override { return 1.0; }

 private:
  std::vector<Batch> batches_;
};

TEST(DiffusionObjective, EvaluateIsDeterministic) {
  const FixedEvalSource source(3);
  for (const std::string name : {"uniform_diffusion", "masked_diffusion", "mixture_diffusion"}) {
    SCOPED_TRACE(name);
    const Config config = tiny_config(name, false);
    auto objective = make_objective(config, ByteTokenizer());
    torch::manual_seed(42);
    auto model = build_language_model(config.model, 260);
    model->eval();
    const auto first = validation_metrics(objective->evaluate(*model, source), source.bytes_per_token());
    torch::manual_seed(4242);  // the global generator must not matter
    const auto second = validation_metrics(objective->evaluate(*model, source), source.bytes_per_token());
    EXPECT_EQ(first, second);
    EXPECT_EQ(first.at("tokens"), 3 * (3 * 16 - 3));
    EXPECT_GT(first.at("loss_nats"), 0.0);
    EXPECT_DOUBLE_EQ(first.at("perplexity"), std::exp(first.at("loss_nats")));
    EXPECT_DOUBLE_EQ(first.at("bits_per_byte"), first.at("loss_nats") / std::log(2.0));
  }
}

TEST(DiffusionObjective, TrainingLowersTheEvalNelbo) {
  const auto dir = testing::temp_dir("diffusion_training");
  const auto data = testing::prepare_word_corpus(dir);
  auto tokenizer = std::make_shared<ByteTokenizer>();
  for (const std::string name : {"uniform_diffusion", "masked_diffusion", "mixture_diffusion"}) {
    SCOPED_TRACE(name);
    const Config config = tiny_config(
        name, name == "uniform_diffusion",
        {"data.path=\"" + data.string() + "\"", "train.steps=40", "train.batch_size=8", "train.eval_interval=0",
         "train.eval_batches=4", "train.checkpoint_interval=0", "train.log_interval=10"});
    auto objective = make_objective(config, *tokenizer);
    WindowLoaderOptions o;
    o.window_len = config.data.seq_len + objective->needs().window_extra;
    o.seed = static_cast<uint64_t>(config.run.seed);
    o.split = "train";
    auto train = std::make_shared<WindowLoader>(config.data.path, o);
    o.split = "val";
    auto val = std::make_shared<WindowLoader>(config.data.path, o);

    torch::manual_seed(static_cast<uint64_t>(config.run.seed));
    auto model = build_language_model(config.model, tokenizer->vocab_size());
    model->eval();
    // The trainer's final eval sees the same batches, times and noise (a fixed seed), so the two are paired.
    const WindowEvalSource eval_source(*val, 8, 4, torch::kCPU);
    const double before =
        validation_metrics(objective->evaluate(*model, eval_source), eval_source.bytes_per_token()).at("loss_nats");
    model->train();
    TrainingSession session(config, model, std::move(objective), tokenizer, dir / name, torch::kCPU);
    WindowSource source(session, train, val);
    int64_t steps = 0;
    source.on_step = [&](int64_t, double) { ++steps; };
    const TrainResult result = session.run(source);
    EXPECT_EQ(steps, 40);
    const double after = result.final_eval.at("loss_nats");
    EXPECT_LT(after, 0.8 * before) << "before " << before << " after " << after;
  }
  std::filesystem::remove_all(dir);
}

// Sharded validation: three ranks' shares of the split (at most 7 batches, not a multiple of 3) sum to the whole
// split's totals, noise included, so a validation number does not depend on the number of ranks.
TEST(DiffusionObjective, ShardedValidationAddsUpToTheWholeSplit) {
  const auto dir = testing::temp_dir("diffusion_sharded_eval");
  const auto data = testing::prepare_word_corpus(dir);
  for (const std::string name : {"uniform_diffusion", "masked_diffusion", "mixture_diffusion"}) {
    SCOPED_TRACE(name);
    const Config config = tiny_config(name, false, {"data.path=\"" + data.string() + "\""});
    auto objective = make_objective(config, ByteTokenizer());
    WindowLoaderOptions o;
    o.window_len = config.data.seq_len + objective->needs().window_extra;
    o.split = "val";
    const WindowLoader val(config.data.path, o);
    torch::manual_seed(3);
    auto model = build_language_model(config.model, 260);
    model->eval();
    const WindowEvalSource split(val, 2, 7, torch::kCPU);
    ASSERT_GE(split.num_batches(), 4);
    const ValidationSums whole = objective->evaluate(*model, split);
    ValidationSums summed;
    int64_t batches = 0;
    for (int64_t rank = 0; rank < 3; ++rank) {
      const WindowEvalSource share(val, 2, 7, torch::kCPU, {}, rank, 3);
      batches += share.num_batches();
      const ValidationSums part = objective->evaluate(*model, share);
      summed.units += part.units;
      for (const auto& [key, value] : part.sums) summed.sums[key] += value;
    }
    EXPECT_EQ(batches, split.num_batches());
    EXPECT_EQ(summed.units, whole.units);
    ASSERT_EQ(summed.sums.size(), whole.sums.size());
    for (const auto& [key, value] : whole.sums) EXPECT_NEAR(summed.sums.at(key), value, 1e-9 * std::abs(value)) << key;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace inkstone
