// Every objective's loss over the vocabulary in row chunks equals the composite over the model's whole [B, T, V]
// logits: losses, per-token terms and every parameter's gradient, with the chunks a few rows each (a vocabulary
// of 65,536 ids and objective.logit_chunk_mib = 1 give 4 rows a chunk).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "objectives/diffusion_objective.h"
#include "objectives/ar.h"
#include "objectives/masked_noise.h"
#include "objectives/mixture_noise.h"
#include "objectives/policy_log_probs.h"
#include "objectives/uniform_noise.h"
#include "objectives/z_loss.h"
#include "tests/fixtures.h"
#include "tests/objectives/diffusion_fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;
using testing::random_batch;
using testing::randomise;
using testing::tiny_config;

constexpr int64_t kWideVocab = 65536;

Config chunked_config(const std::string& objective, bool time_conditioning, std::vector<std::string> extra = {}) {
  extra.push_back("model.vocab_size=" + std::to_string(kWideVocab));
  extra.push_back("objective.logit_chunk_mib=1");
  extra.push_back("objective.z_loss=1e-3");
  return tiny_config(objective, time_conditioning, extra);
}

std::vector<torch::Tensor> gradients_of(const torch::Tensor& loss, LanguageModelImpl& model) {
  const auto params = model.parameters();
  std::vector<torch::Tensor> with_grad;
  for (const auto& p : params)
    if (p.requires_grad()) with_grad.push_back(p);
  return torch::autograd::grad({loss}, with_grad, {}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

// Relative to the largest gradient entry of all parameters.
void expect_same_gradients(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                           double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (const auto& w : want)
    if (w.defined()) scale = std::max(scale, w.abs().max().item<double>());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << "parameter " << i;
    if (got[i].defined()) EXPECT_LE(max_abs_diff(got[i], want[i]), tolerance * scale) << "parameter " << i;
  }
}

void expect_close_value(const torch::Tensor& got, const torch::Tensor& want, double tolerance) {
  EXPECT_LE(max_abs_diff(got, want), tolerance * std::max(1.0, want.abs().max().item<double>()));
}

TEST(ChunkedObjectives, AutoregressiveLossAndGradientsEqualTheComposite) {
  torch::manual_seed(41);
  const Config config = chunked_config("ar", false);
  AutoregressiveObjective objective(config);
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  const Batch batch = random_batch(3, 17);

  const auto out = objective.loss(*model, batch);
  const auto got = gradients_of(out.loss_sum, *model);

  using torch::indexing::Slice;
  const auto targets = batch.tokens.index({Slice(), Slice(1, torch::indexing::None)});
  const auto real = batch.real.index({Slice(), Slice(1, torch::indexing::None)}) & batch.real.index({Slice(), Slice(0, -1)});
  const auto logits = model->forward(batch.tokens.index({Slice(), Slice(0, -1)}));
  const auto nll = (-torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)).masked_fill(~real, 0.0);
  const auto log_z2 = log_z_squared(logits).masked_fill(~real, 0.0);
  const auto composite = nll.sum() + 1e-3 * log_z2.sum();
  const auto want = gradients_of(composite, *model);

  expect_close_value(out.loss_sum.detach(), composite.detach(), 1e-6);
  expect_close_value(out.metric_sums.at("log_z_squared"), log_z2.sum().detach(), 1e-6);
  EXPECT_EQ(out.metric_sums.at("accuracy").item<double>(),
            (logits.argmax(-1).eq(targets) & real).sum().item<double>());
  expect_same_gradients(got, want, 1e-6);
}

// The uniform and mixture (with the IS part weighted differently from 1) and masked NELBOs at fixed t and z.
template <typename Noise>
void expect_diffusion_equal_to_composite(const std::string& name, bool time_conditioning,
                                         const std::vector<std::string>& extra = {}) {
  torch::manual_seed(42);
  const Config config = chunked_config(name, time_conditioning, extra);
  DiffusionObjective objective(config, ByteTokenizer(), std::make_shared<Noise>(config.diffusion));
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  const Batch batch = random_batch(3, 12);
  const auto t = torch::tensor({0.05f, 0.5f, 0.95f}).view({3, 1});
  const auto alpha = objective.noise()->levels(t).keep;
  const auto z = torch::where(batch.real, objective.corrupt(batch.tokens, t, nullptr), batch.tokens);
  const auto scores = objective.score(*model, batch, t, z);
  const auto got = gradients_of(scores.loss, *model);

  WindowInputs args;
  args.mask = MaskMode::bidirectional;
  if (time_conditioning) args.noise_level = -torch::log(alpha.view({3}));
  const auto logits = model->forward(z, args);
  const auto log_x_hat = torch::log_softmax(objective.support().restrict_logits(logits), -1);
  const auto a_prime = objective.schedule().alpha_prime(t);
  torch::Tensor nelbo, trained;
  if constexpr (std::is_same_v<Noise, UniformNoise>) {
    const auto terms = uniform_token_terms(log_x_hat, batch.tokens, z, alpha, a_prime, objective.support().size());
    nelbo = terms.nelbo;
    trained = terms.nelbo - 0.5 * terms.is_divergence;
  } else if constexpr (std::is_same_v<Noise, MixtureNoise>) {
    const auto per_token = [&](const NoiseLevels& l) {
      const auto each = [&](const torch::Tensor& v) { return v.expand(z.sizes()); };
      return NoiseLevels{each(l.keep), each(l.mask), each(l.uniform)};
    };
    const auto terms = interpolating_token_terms(log_x_hat, batch.tokens, z, per_token(objective.noise()->levels(t)),
                                                 per_token(objective.noise()->rates(t)),
                                                 {objective.support().size(), ByteTokenizer().specials().mask});
    nelbo = terms.nelbo;
    trained = terms.nelbo - 0.5 * terms.is_divergence;
  } else {
    nelbo = masked_nelbo_per_token(log_x_hat, batch.tokens, z, ByteTokenizer().specials().mask, alpha, a_prime);
    trained = nelbo;
  }
  const auto weighted = (trained * training_weight(*objective.noise(), config.diffusion, t)).masked_fill(~batch.real, 0.0);
  const auto composite = weighted.sum() + 1e-3 * log_z_squared(logits).masked_fill(~batch.real, 0.0).sum();
  const auto want = gradients_of(composite, *model);

  expect_close_value(scores.loss.detach(), composite.detach(), 1e-6);
  expect_close_value(scores.nelbo, nelbo.masked_fill(~batch.real, 0.0).detach(), 1e-6);
  expect_close_value(scores.weighted, weighted.detach(), 1e-6);
  expect_same_gradients(got, want, 1e-5);
}

TEST(ChunkedObjectives, UniformDiffusionLossAndGradientsEqualTheComposite) {
  expect_diffusion_equal_to_composite<UniformNoise>("uniform_diffusion", false, {"diffusion.is_weight=0.5"});
  expect_diffusion_equal_to_composite<UniformNoise>("uniform_diffusion", true, {"diffusion.is_weight=0.5"});
}

TEST(ChunkedObjectives, MixtureDiffusionLossAndGradientsEqualTheComposite) {
  expect_diffusion_equal_to_composite<MixtureNoise>("mixture_diffusion", true,
                                                    {"diffusion.is_weight=0.5", "diffusion.mixture_uniform=0.3"});
}

TEST(ChunkedObjectives, MaskedDiffusionLossAndGradientsEqualTheComposite) {
  expect_diffusion_equal_to_composite<MaskedNoise>("masked_diffusion", false);
}

TEST(ChunkedObjectives, PolicyLogProbsAndEntropyWithTheirGradientsEqualTheComposite) {
  torch::manual_seed(43);
  const Config config = chunked_config("ar", false);
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  Batch batch = random_batch(3, 14);
  batch.rollout.policy = torch::zeros({3, 14}, torch::kBool);
  batch.rollout.policy.index_put_({torch::indexing::Slice(), torch::indexing::Slice(5, 11)}, true);
  const double temperature = 0.8;
  const auto upstream = torch::randn({3, 14});

  const auto scored = policy_log_probs(*model, batch, temperature, /*logit_chunk_mib=*/1, /*with_entropy=*/true);
  const auto got = gradients_of((scored.log_probs * upstream).sum() + scored.entropy.sum(), *model);

  using torch::indexing::Slice;
  const auto logits = model->logits(model->hidden_states(batch.tokens.index({Slice(), Slice(0, -1)})), HeadRows::tokens);
  EXPECT_EQ(logits.size(-1), 260);  // the tokenizer's ids, not the padded vocabulary
  const auto log_softmax = torch::log_softmax(logits / temperature, -1);
  const auto targets = batch.tokens.index({Slice(), Slice(1, torch::indexing::None)});
  const auto pad = [&](const torch::Tensor& v) {
    return torch::cat({torch::zeros({3, 1}), v}, 1).masked_fill(~batch.rollout.policy, 0.0);
  };
  const auto log_probs = pad(log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1));
  const auto entropy = pad(-(log_softmax.exp() * log_softmax).sum(-1));
  const auto want = gradients_of((log_probs * upstream).sum() + entropy.sum(), *model);

  expect_close_value(scored.log_probs.detach(), log_probs.detach(), 1e-6);
  expect_close_value(scored.entropy.detach(), entropy.detach(), 1e-6);
  expect_same_gradients(got, want, 1e-5);
}

}  // namespace
}  // namespace inkstone
