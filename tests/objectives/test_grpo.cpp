// GRPO (docs/rl.md, "GRPO") against a hand-computed example: one group of two rollouts with chosen token ratios,
// every aggregation mode, group std scaling, clip fractions and the k3 KL term.
#include <cmath>

#include <gtest/gtest.h>

#include "config/config.h"
#include "objectives/grpo.h"
#include "tests/objectives/rollout_fixtures.h"

namespace inkstone {
namespace {

// Row 0: prompt [1, 2], completion [3, 4], reward 1, ratios 1.5, 0.9.
// Row 1: prompt [5], completion [6, 7, 8], reward 0, ratios 0.5, 1.1, 1.0.
// With A = ±0.5 and ε = 0.2 the per-token losses −min(ρA, clip(ρ)A) are −0.6, −0.45 and 0.4, 0.55, 0.5:
// row sums −1.05 and 1.45, five tokens, one clipped low (0.5, A < 0) and one clipped high (1.5, A > 0).
struct Example {
  LanguageModel model{nullptr};
  Batch batch;
  torch::Tensor current_log_probs;  // log π_θ of the model as it is
};

Example example() {
  Example e{testing::tiny_policy(11), {}, {}};
  e.batch = testing::rollout_batch(*e.model, {{{1, 2}, {3, 4}, 1.0, 0}, {{5}, {6, 7, 8}, 0.0, 0}});
  e.current_log_probs = e.batch.rollout.old_log_probs;
  auto log_ratio = torch::zeros_like(e.batch.rollout.old_log_probs);
  log_ratio[0][2] = std::log(1.5);
  log_ratio[0][3] = std::log(0.9);
  log_ratio[1][1] = std::log(0.5);
  log_ratio[1][2] = std::log(1.1);
  e.batch.rollout.old_log_probs = e.batch.rollout.old_log_probs - log_ratio;
  return e;
}

Config grpo_config(const std::string& aggregation, const std::string& scale = "none") {
  Config c = default_config();
  c.objective.name = "grpo";
  apply_override(c, "grpo.aggregation=\"" + aggregation + "\"");
  apply_override(c, "grpo.scale_rewards=\"" + scale + "\"");
  c.rl.max_new_tokens = 4;
  return c;
}

double mean_loss(const LossOutput& out) { return out.loss_sum.item<double>() / out.count.item<double>(); }

TEST(Grpo, EveryAggregationModeMatchesTheHandComputedLoss) {
  Example e = example();
  const std::vector<std::pair<std::string, double>> expected = {
      {"token_mean", 0.4 / 5},                            // Σ J / Σ |y|
      {"seq_mean_token_mean", (-1.05 / 2 + 1.45 / 3) / 2},  // mean over rows of the row's token mean
      {"seq_mean_token_sum", 0.4 / 2},                    // mean over rows of the row's sum
      {"dr_grpo", 0.4 / (2 * 4)},                         // Σ J / (G · L_max), L_max = 4
  };
  for (const auto& [mode, value] : expected) {
    GrpoObjective objective(grpo_config(mode), testing::policy_tokenizer());
    EXPECT_NEAR(mean_loss(objective.loss(*e.model, e.batch)), value, 1e-5) << mode;
  }
}

TEST(Grpo, GroupStdScalingDividesTheAdvantage) {
  Example e = example();
  GrpoObjective objective(grpo_config("token_mean", "group"), testing::policy_tokenizer());
  const double std_dev = std::sqrt(0.5);  // unbiased std of {1, 0}
  const double scale = 0.5 / (std_dev + 1e-4) / 0.5;
  EXPECT_NEAR(mean_loss(objective.loss(*e.model, e.batch)), 0.4 / 5 * scale, 1e-5);
}

TEST(Grpo, ClipFractionsPerTokenAndPerSequence) {
  Example e = example();
  GrpoObjective tokens(grpo_config("token_mean"), testing::policy_tokenizer());
  const auto t = tokens.loss(*e.model, e.batch);
  EXPECT_NEAR(t.metric_sums.at("clip_fraction_low").item<double>() / t.count.item<double>(), 1.0 / 5, 1e-6);
  EXPECT_NEAR(t.metric_sums.at("clip_fraction_high").item<double>() / t.count.item<double>(), 1.0 / 5, 1e-6);
  EXPECT_NEAR(t.metric_sums.at("clip_fraction").item<double>() / t.count.item<double>(), 2.0 / 5, 1e-6);
  GrpoObjective sequences(grpo_config("seq_mean_token_mean"), testing::policy_tokenizer());
  const auto s = sequences.loss(*e.model, e.batch);
  EXPECT_NEAR(s.metric_sums.at("clip_fraction_low").item<double>() / s.count.item<double>(), (0 + 1.0 / 3) / 2, 1e-6);
  EXPECT_NEAR(s.metric_sums.at("clip_fraction_high").item<double>() / s.count.item<double>(), (0.5 + 0) / 2, 1e-6);
}

TEST(Grpo, K3KlToTheReferenceIsAddedPerToken) {
  Example e = example();
  // log π_ref − log π_θ = 0.1 on every policy token: k3 = e^0.1 − 0.1 − 1.
  e.batch.rollout.ref_log_probs = e.current_log_probs + 0.1 * e.batch.rollout.policy.to(torch::kFloat);
  Config c = grpo_config("token_mean");
  c.grpo.kl_coef = 0.5;
  GrpoObjective objective(c, testing::policy_tokenizer());
  const auto out = objective.loss(*e.model, e.batch);
  const double k3 = std::exp(0.1) - 0.1 - 1.0;
  EXPECT_NEAR(mean_loss(out), 0.4 / 5 + 0.5 * k3, 1e-5);
  EXPECT_NEAR(out.metric_sums.at("kl_ref").item<double>() / out.count.item<double>(), k3, 1e-5);
}

}  // namespace
}  // namespace inkstone
