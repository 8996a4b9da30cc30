// Rollouts: the batch layout, log-probs equal to a full forward's at the drawn tokens, and stop strings.
#include <gtest/gtest.h>

#include "dataset/byte_tokenizer.h"
#include "objectives/diffusion_policy.h"
#include "objectives/masked_noise.h"
#include "objectives/uniform_noise.h"
#include "rl/policy_rollouts.h"
#include "sampler/diffusion_posterior.h"
#include "objectives/policy_log_probs.h"
#include "sampler/diffusion_rollout.h"
#include "sampler/rollout.h"
#include "tests/objectives/rollout_fixtures.h"

namespace inkstone {
namespace {

const std::vector<std::vector<int32_t>> kPrompts = {{'1', '+', '2', '='}, {'7', '*'}, {'x'}};

RolloutOptions options(double temperature, std::vector<std::string> stop = {}) {
  RolloutOptions o;
  o.group_size = 3;
  o.max_new_tokens = 10;
  o.sampling.temperature = temperature;
  o.seed = 4;
  o.stop = std::move(stop);
  o.end_ids = {ByteTokenizer().specials().eos};
  return o;
}

TEST(Rollout, LayoutGroupsLengthsAndTruncation) {
  ByteTokenizer tokenizer;
  auto model = testing::tiny_policy(tokenizer.vocab_size());
  const Rollouts r = generate_rollouts(model, tokenizer, kPrompts, options(1.0), /*first_group=*/10);
  ASSERT_EQ(r.batch.tokens.size(0), 9);
  int64_t generated = 0;
  for (int64_t i = 0; i < 9; ++i) {
    const auto& prompt = kPrompts[i / 3];
    EXPECT_EQ(r.batch.rollout.groups[i].item<int64_t>(), 10 + i / 3);
    EXPECT_EQ(r.batch.rollout.policy[i].sum().item<int64_t>(), r.lengths[i]);
    EXPECT_EQ(r.batch.real[i].sum().item<int64_t>(), static_cast<int64_t>(prompt.size()) + r.lengths[i]);
    for (size_t t = 0; t < prompt.size(); ++t) EXPECT_EQ(r.batch.tokens[i][t].item<int64_t>(), prompt[t]);
    const int64_t last = r.batch.tokens[i][static_cast<int64_t>(prompt.size()) + r.lengths[i] - 1].item<int64_t>();
    EXPECT_EQ(r.truncated[i], last != tokenizer.specials().eos);
    EXPECT_EQ(r.truncated[i], r.lengths[i] == 10 && last != tokenizer.specials().eos);
    generated += r.lengths[i];
  }
  EXPECT_EQ(r.generated_tokens, generated);
  EXPECT_GT(r.tokens_per_s, 0);
}

TEST(Rollout, LogProbsEqualAFullForwardAtTheDrawnTokens) {
  ByteTokenizer tokenizer;
  auto model = testing::tiny_policy(tokenizer.vocab_size());
  for (double temperature : {1.0, 0.7}) {
    const Rollouts r = generate_rollouts(model, tokenizer, kPrompts, options(temperature));
    torch::NoGradGuard no_grad;
    const auto full = policy_log_probs(*model, r.batch, temperature, /*logit_chunk_mib=*/256).log_probs;
    EXPECT_TRUE(torch::allclose(full, r.batch.rollout.rollout_log_probs, 1e-4, 1e-4))
        << "temperature " << temperature << ", max diff "
        << (full - r.batch.rollout.rollout_log_probs).abs().max().item<double>();
  }
}

// The same seed draws the same tokens, so with a stop string each completion is the unstopped one cut right
// after the string's first appearance.
TEST(Rollout, StopStringsEndCompletionsAtTheirFirstAppearance) {
  ByteTokenizer tokenizer;
  auto model = testing::tiny_policy(tokenizer.vocab_size());
  const Rollouts free = generate_rollouts(model, tokenizer, kPrompts, options(1.0));
  std::string stop;
  for (const auto& text : free.completions)
    if (text.size() >= 6) stop = text.substr(3, 2);
  ASSERT_FALSE(stop.empty()) << "no completion long enough to take a stop string from";

  const Rollouts stopped = generate_rollouts(model, tokenizer, kPrompts, options(1.0, {"no such text", stop}));
  int64_t cut = 0;
  for (size_t i = 0; i < free.completions.size(); ++i) {
    const auto at = free.completions[i].find(stop);
    if (at == std::string::npos) {
      EXPECT_EQ(stopped.completions[i], free.completions[i]);
      continue;
    }
    ++cut;
    EXPECT_EQ(stopped.completions[i], free.completions[i].substr(0, at + stop.size()));
    EXPECT_FALSE(stopped.truncated[i]);
  }
  EXPECT_GE(cut, 1);
}

// Diffusion rollouts (sampler/diffusion_rollout.h): rows of one length whose every non-prompt position is the
// policy's, text up to the first end id, and each row's draws keyed by its global sequence number: the prompts
// denoised one call each give the completions of one call over all of them.
TEST(DiffusionRollout, TheCanvasIsThePolicysAndRowsDoNotDependOnTheirBatch) {
  ByteTokenizer tokenizer;
  Config config = default_config();
  config.model = testing::tiny_policy_config();
  config.model.max_seq_len = 32;
  auto model = testing::tiny_policy(tokenizer.vocab_size());
  DiffusionProcess process;
  process.noise = std::make_shared<MaskedNoise>(config.diffusion);
  process.support = std::make_shared<NoiseSupport>(tokenizer, tokenizer.vocab_size(), false);
  process.mask_id = tokenizer.specials().mask;
  process.end_id = tokenizer.specials().eos;
  DiffusionSampleOptions denoising;
  denoising.steps = 4;
  const RolloutOptions o = options(1.0);
  const Rollouts all = generate_diffusion_rollouts(model, process, tokenizer, kPrompts, o, denoising, 10);
  ASSERT_EQ(all.batch.tokens.sizes(), (std::vector<int64_t>{9, 4 + 10}));
  EXPECT_TRUE(all.batch.real.all().item<bool>());
  EXPECT_EQ(all.batch.rollout.groups[4].item<int64_t>(), 11);
  for (int64_t r = 0; r < 9; ++r) {
    const int64_t prompt = static_cast<int64_t>(kPrompts[static_cast<size_t>(r / 3)].size());
    EXPECT_EQ(all.batch.rollout.policy[r].sum().item<int64_t>(), 14 - prompt);  // a shorter prompt, a longer canvas
    EXPECT_FALSE(all.batch.rollout.policy[r].narrow(0, 0, prompt).any().item<bool>());
    std::vector<int32_t> text;
    for (int64_t i = prompt; i < 14; ++i) {
      const auto id = static_cast<int32_t>(all.batch.tokens[r][i].item<int64_t>());
      if (id == tokenizer.specials().eos) break;
      text.push_back(id);
    }
    EXPECT_EQ(all.completions[static_cast<size_t>(r)], tokenizer.decode(text));
    EXPECT_EQ(all.lengths[static_cast<size_t>(r)], static_cast<int64_t>(text.size()));
  }
  EXPECT_EQ(std::get<0>(torch::_unique(all.batch.rollout.noise_keys)).numel(), 9);
  // The longest prompt alone, as group 10 again: the same canvas width, the same rows.
  const Rollouts first = generate_diffusion_rollouts(model, process, tokenizer, {kPrompts[0]}, o, denoising, 10);
  EXPECT_TRUE(torch::equal(first.batch.tokens, all.batch.tokens.narrow(0, 0, 3)));
  EXPECT_TRUE(torch::equal(first.batch.rollout.noise_keys, all.batch.rollout.noise_keys.narrow(0, 0, 3)));
}

// A trajectory recorded by the sampler (rl.likelihood = transitions): the log-probability it reports for each
// draw is the full posterior's (sampler/diffusion_posterior.h) at the drawn token, and the trainer's recomputation
// from the recorded states (objectives/diffusion_policy.h) gives the same numbers, with a finite gradient.
void expect_transitions_reproduced(const std::string& objective, bool time_conditioning) {
  ByteTokenizer tokenizer;
  Config config = default_config();
  config.model = testing::tiny_policy_config();
  config.model.max_seq_len = 32;
  config.model.time_conditioning = time_conditioning;
  config.model.tie_embeddings = !time_conditioning;
  config.objective.name = "gflowrl";
  config.rl.policy = objective;
  config.rl.likelihood = SequenceLikelihood::transitions;
  config.rl.temperature = 0.8;
  torch::manual_seed(8);
  auto model = build_language_model(config.model, tokenizer.vocab_size());
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0.0, 0.1);  // time conditioning reaches the logits
  }
  std::shared_ptr<const NoiseProcess> noise;
  if (objective == "masked_diffusion") noise = std::make_shared<MaskedNoise>(config.diffusion);
  else noise = std::make_shared<UniformNoise>(config.diffusion);
  DiffusionProcess process;
  process.noise = noise;
  process.support = std::make_shared<NoiseSupport>(tokenizer, tokenizer.vocab_size(), false);
  process.mask_id = tokenizer.specials().mask;
  process.end_id = tokenizer.specials().eos;
  process.time_conditioned = time_conditioning;
  DiffusionSampleOptions denoising;
  denoising.steps = 5;
  denoising.record_trajectory = true;
  RolloutOptions o = options(config.rl.temperature);
  o.max_new_tokens = 6;
  const Rollouts r = generate_diffusion_rollouts(model, process, tokenizer, kPrompts, o, denoising, 3);
  const auto& rollout = r.batch.rollout;
  ASSERT_EQ(rollout.trajectory.size(1), 5 + 2);  // the prior, 5 steps and the final draw
  EXPECT_TRUE(torch::equal(rollout.trajectory.select(1, 6), r.batch.tokens));

  // The reported log-probs against the full posterior of every transition, in float64.
  const auto support = process.support->member_mask(torch::kCPU);
  auto expected = torch::zeros(r.batch.tokens.sizes(), torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    for (int64_t k = 0; k < 6; ++k) {
      const auto z_t = rollout.trajectory.select(1, k), z_s = rollout.trajectory.select(1, k + 1);
      const auto lv = rollout.transition_levels[0][k];
      const NoiseLevelsAt at_t{lv[0].item<double>(), lv[1].item<double>(), lv[2].item<double>()};
      const NoiseLevelsAt at_s{lv[3].item<double>(), lv[4].item<double>(), lv[5].item<double>()};
      WindowInputs window;
      window.mask = MaskMode::bidirectional;
      if (time_conditioning)
        window.noise_level = torch::full({z_t.size(0)}, -std::log(at_t.keep), torch::kFloat);
      const auto logits = process.support->restrict_logits(model->forward(z_t, window).to(torch::kDouble));
      const auto x_hat = torch::softmax(logits / config.rl.temperature, -1);
      const auto q = interpolating_posterior(x_hat, z_t, at_t, at_s, support, process.mask_id);
      expected += q.gather(-1, z_s.unsqueeze(-1)).squeeze(-1).log().masked_fill(~rollout.policy, 0.0);
    }
  }
  EXPECT_TRUE(torch::isfinite(expected).all().item<bool>());
  EXPECT_LT(expected.sum().item<double>(), -1.0);  // draws that were not certain
  EXPECT_TRUE(torch::allclose(rollout.rollout_log_probs.to(torch::kDouble), expected, 1e-4, 1e-4))
      << (rollout.rollout_log_probs.to(torch::kDouble) - expected).abs().max().item<double>();

  const DiffusionPolicy policy(config, tokenizer, noise);
  const auto scored = policy.log_probs(*model, r.batch, false, false).log_probs;
  EXPECT_TRUE(torch::allclose(scored.to(torch::kDouble), expected, 1e-4, 1e-4))
      << (scored.to(torch::kDouble) - expected).abs().max().item<double>();
  scored.sum().backward();
  for (const auto& p : model->parameters())
    if (p.grad().defined()) EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>());
}

TEST(DiffusionRollout, MaskedTransitionsAreScoredAsTheSamplerDrewThem) {
  expect_transitions_reproduced("masked_diffusion", /*time_conditioning=*/false);
}

TEST(DiffusionRollout, UniformTransitionsOfATimeConditionedModelAreScoredAsTheSamplerDrewThem) {
  expect_transitions_reproduced("uniform_diffusion", /*time_conditioning=*/true);
}

// Settings that cannot work are refused by name: an RL objective as the policy, the likelihood keys on a causal
// policy, a trajectory the chosen sampler cannot record.
TEST(DiffusionRollout, PolicySettingsThatCannotWorkAreRefusedByName) {
  ByteTokenizer tokenizer;
  Config config = default_config();
  config.objective.name = "gflowrl";
  config.rl.policy = "grpo";
  EXPECT_NE(testing::input_error_of([&] { make_policy_likelihood(config, tokenizer); })
                .find("rl.policy = 'grpo' must name the objective that trained the policy (ar, masked_diffusion"),
            std::string::npos);
  config.rl.policy = "ar";
  config.rl.likelihood = SequenceLikelihood::one_step;
  EXPECT_NE(testing::input_error_of([&] { make_policy_likelihood(config, tokenizer); })
                .find("rl.policy = 'ar' decodes left to right"),
            std::string::npos);
  config.rl.policy = "masked_diffusion";
  config.rl.likelihood = SequenceLikelihood::transitions;
  config.sample.diffusion_sampler = "confidence";
  auto model = testing::tiny_policy(tokenizer.vocab_size());
  EXPECT_NE(testing::input_error_of([&] { policy_rollouts(model, config, tokenizer); })
                .find("rl.likelihood = \"transitions\": a recorded diffusion trajectory needs the ancestral sampler"),
            std::string::npos);
}

}  // namespace
}  // namespace inkstone
