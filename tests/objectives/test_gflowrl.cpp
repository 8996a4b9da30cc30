// GFlowRL (docs/rl.md, "First-step gradient" and "Fixed point"): first-step equivalence to GRPO / REINFORCE,
// zero-sum flow gaps, clip bounds and saturation counts, stop-gradient weights, degenerate-group filtering.
#include <gtest/gtest.h>

#include "config/config.h"
#include "objectives/gflowrl.h"
#include "objectives/grpo.h"
#include "tests/objectives/rollout_fixtures.h"

namespace inkstone {
namespace {

using testing::flat_gradient;
using testing::random_rows;
using testing::rollout_batch;
using testing::tiny_policy;

constexpr int64_t kGflowrlVocab = 17;

// Two non-degenerate groups of four with binary and partial rewards.
const std::vector<double> kRewards = {1, 0, 0, 1, 0.5, 0, 1, 1};

Config gflowrl_config(const std::string& norm) {
  Config c = default_config();
  c.objective.name = "gflowrl";
  apply_override(c, "gflowrl.norm=\"" + norm + "\"");
  c.gflowrl.beta = 3.0;
  // Bounds above every |g| of these batches: the clip is inactive (the setting of docs/rl.md,
  // "First-step gradient").
  c.gflowrl.push_up = 1e6;
  c.gflowrl.push_down = 1e6;
  return c;
}

torch::Tensor mean_loss(Objective& objective, LanguageModelImpl& model, const Batch& batch) {
  auto out = objective.loss(model, batch);
  return out.loss_sum / out.count;
}

// docs/rl.md, "First-step gradient", with π_ref = π_old: ∇L_GFlowRL = 2β ∇L_GRPO, L_GRPO with A = r − r̄ and
// ratio 1; norm none pairs with sequence sums, norm both with per-sequence token means.
void expect_two_beta_grpo(const std::string& norm, const std::string& aggregation) {
  auto model = tiny_policy(kGflowrlVocab);
  const Batch batch = rollout_batch(*model, random_rows(2, 4, kGflowrlVocab, kRewards, 3));
  Config c = gflowrl_config(norm);
  c.grpo.scale_rewards = RewardScale::none;
  apply_override(c, "grpo.aggregation=\"" + aggregation + "\"");
  GflowrlObjective gflowrl(c, testing::policy_tokenizer());
  GrpoObjective grpo(c, testing::policy_tokenizer());
  const auto g_flow = flat_gradient(*model, mean_loss(gflowrl, *model, batch));
  const auto g_grpo = flat_gradient(*model, mean_loss(grpo, *model, batch));
  ASSERT_GT(g_grpo.norm().item<double>(), 1e-4);
  EXPECT_TRUE(torch::allclose(g_flow, 2.0 * c.gflowrl.beta * g_grpo, 1e-4, 1e-6))
      << "max diff " << (g_flow - 2.0 * c.gflowrl.beta * g_grpo).abs().max().item<double>();
}

TEST(Gflowrl, FirstStepIsTwoBetaTimesGrpoWithoutNormalisation) { expect_two_beta_grpo("none", "seq_mean_token_sum"); }

TEST(Gflowrl, FirstStepIsTwoBetaTimesGrpoWithLengthNormalisation) {
  expect_two_beta_grpo("both", "seq_mean_token_mean");
}

// docs/rl.md, "First-step gradient", with a reference: −∇L = (2/G) Σ_i (s_i − s̄) ∇ℓ_i, REINFORCE on
// β r − log(π_old/π_ref) with a group mean.
TEST(Gflowrl, FirstStepIsReinforceOnTheKlRegularisedReturn) {
  auto model = tiny_policy(kGflowrlVocab);
  Batch batch = rollout_batch(*model, random_rows(2, 4, kGflowrlVocab, kRewards, 4));
  torch::manual_seed(9);
  batch.rollout.ref_log_probs =
      batch.rollout.old_log_probs + 0.3 * torch::randn_like(batch.rollout.old_log_probs) * batch.rollout.policy;
  const Config c = gflowrl_config("none");
  GflowrlObjective gflowrl(c, testing::policy_tokenizer());
  const auto g_flow = flat_gradient(*model, mean_loss(gflowrl, *model, batch));

  const auto theta = policy_log_probs(*model, batch, 1.0, /*logit_chunk_mib=*/256).log_probs.sum(1);
  const auto s = c.gflowrl.beta * batch.rollout.rewards +
                 (batch.rollout.ref_log_probs - batch.rollout.old_log_probs).sum(1);
  const auto s_bar = s.view({2, 4}).mean(1, true).expand({2, 4}).reshape(-1);
  const auto reinforce = -((s - s_bar).detach() * theta).sum() / 8.0;
  const auto g_reinforce = flat_gradient(*model, reinforce);
  EXPECT_TRUE(torch::allclose(g_flow, 2.0 * g_reinforce, 1e-4, 1e-6));
}

TEST(Gflowrl, FlowGapsSumToZeroPerGroupForNoneAndBoth) {
  auto model = tiny_policy(kGflowrlVocab);
  Batch batch = rollout_batch(*model, random_rows(2, 4, kGflowrlVocab, kRewards, 5));
  batch.rollout.ref_log_probs = batch.rollout.old_log_probs - 0.7 * batch.rollout.policy.to(torch::kFloat);
  for (const char* norm : {"none", "both"}) {
    const FlowGaps f = flow_gaps(gflowrl_config(norm).gflowrl, batch);
    const auto sums = f.gap.view({2, 4}).sum(1);
    EXPECT_TRUE(torch::allclose(sums, torch::zeros_like(sums), 0, 1e-5)) << norm << ": " << sums;
  }
  // `paper` mixes scales (docs/rl.md, "Length normalisation"): its gaps sum to Σ d_i (1 − 1/|y_i|), not zero,
  // whenever lengths exceed 1.
  const FlowGaps paper = flow_gaps(gflowrl_config("paper").gflowrl, batch);
  const auto drift = -0.7 * paper.lengths;
  const auto expected = (drift * (1.0 - 1.0 / paper.lengths)).view({2, 4}).sum(1);
  EXPECT_TRUE(torch::allclose(paper.gap.view({2, 4}).sum(1), expected, 1e-4, 1e-5));
}

TEST(Gflowrl, ClipBoundsHoldAndSaturationCountsMatchBruteForce) {
  auto model = tiny_policy(kGflowrlVocab);
  torch::manual_seed(21);
  std::vector<double> rewards;
  for (int i = 0; i < 24; ++i) rewards.push_back(torch::rand({1}).item<double>());
  Batch batch = rollout_batch(*model, random_rows(4, 6, kGflowrlVocab, rewards, 6));
  batch.rollout.ref_log_probs =
      batch.rollout.old_log_probs + 0.2 * torch::randn_like(batch.rollout.old_log_probs) * batch.rollout.policy;
  Config c = gflowrl_config("none");
  c.gflowrl.beta = 2.0;
  c.gflowrl.push_up = 0.28;
  c.gflowrl.push_down = 0.2;
  const FlowGaps f = flow_gaps(c.gflowrl, batch);
  EXPECT_GE(f.clipped.min().item<double>(), -0.28 - 1e-7);
  EXPECT_LE(f.clipped.max().item<double>(), 0.2 + 1e-7);

  int64_t up = 0, down = 0;
  for (int64_t i = 0; i < f.gap.size(0); ++i) {
    const double g = f.gap[i].item<double>();
    up += g <= -0.28;
    down += g >= 0.2;
  }
  ASSERT_GT(up + down, 0);
  GflowrlObjective objective(c, testing::policy_tokenizer());
  const auto out = objective.loss(*model, batch);
  EXPECT_EQ(out.count.item<double>(), 24.0);
  EXPECT_EQ(out.metric_sums.at("saturated_push_up").item<double>(), static_cast<double>(up));
  EXPECT_EQ(out.metric_sums.at("saturated_push_down").item<double>(), static_cast<double>(down));
}

// Off-policy (old ≠ current), the gradient is the analytic one of docs/rl.md, "Importance correction",
// Σ 2 w_i δ_i k_i ∇ℓ_i with w held constant: the IS weight carries no gradient. Also checks w ≡ 1 on policy.
TEST(Gflowrl, ImportanceWeightsAreCappedConstants) {
  auto model = tiny_policy(kGflowrlVocab);
  Batch batch = rollout_batch(*model, random_rows(2, 4, kGflowrlVocab, kRewards, 7));
  Config c = gflowrl_config("both");
  c.gflowrl.is_ratio = ImportanceRatio::raw;
  GflowrlObjective objective(c, testing::policy_tokenizer());
  {
    const auto on_policy = objective.loss(*model, batch);
    EXPECT_NEAR(on_policy.metric_sums.at("is_weight").item<double>() / on_policy.count.item<double>(), 1.0, 1e-5);
  }
  torch::manual_seed(8);
  batch.rollout.old_log_probs =
      batch.rollout.old_log_probs + 0.4 * torch::randn_like(batch.rollout.old_log_probs) * batch.rollout.policy;
  const auto out = objective.loss(*model, batch);
  const auto g_loss = flat_gradient(*model, out.loss_sum);

  const FlowGaps f = flow_gaps(c.gflowrl, batch);
  const auto theta = policy_log_probs(*model, batch, 1.0, /*logit_chunk_mib=*/256).log_probs.sum(1);
  const auto rho = (theta - f.old_seq).detach();
  const auto w = rho.clamp_max(10).exp().clamp_max(1.0 + c.gflowrl.is_eps);
  const auto delta = f.clipped + rho / f.lengths;
  EXPECT_LT(w.min().item<double>(), 1.0 + c.gflowrl.is_eps);  // some weights are below the cap
  EXPECT_NEAR(out.metric_maxes.at("is_weight_max").item<double>(), w.max().item<double>(), 1e-5);
  const auto surrogate = (2.0 * w * delta / f.lengths * theta).sum();
  EXPECT_TRUE(torch::allclose(g_loss, flat_gradient(*model, surrogate), 1e-4, 1e-6));
}

TEST(Gflowrl, DegenerateGroupsAddNoLossAndLeaveTheDenominator) {
  auto model = tiny_policy(kGflowrlVocab);
  std::vector<double> rewards = kRewards;
  rewards.insert(rewards.end(), {1, 1, 1, 1});  // a third group, all correct
  const auto rows = random_rows(3, 4, kGflowrlVocab, rewards, 10);
  // A drift that varies by length gives the degenerate group non-zero gaps, so dropping it is visible.
  auto with_drift = [&](Batch batch) {
    batch.rollout.ref_log_probs = batch.rollout.old_log_probs - 0.5 * batch.rollout.policy.to(torch::kFloat);
    return batch;
  };
  const Batch all = with_drift(rollout_batch(*model, rows));
  const Batch kept = with_drift(rollout_batch(*model, std::vector<testing::RolloutRow>(rows.begin(), rows.begin() + 8)));
  Config c = gflowrl_config("none");
  GflowrlObjective objective(c, testing::policy_tokenizer());
  const auto with_degenerate = objective.loss(*model, all);
  const auto without = objective.loss(*model, kept);
  EXPECT_EQ(with_degenerate.count.item<double>(), 8.0);
  EXPECT_NEAR(with_degenerate.loss_sum.item<double>(), without.loss_sum.item<double>(), 1e-5);

  c.gflowrl.filter_degenerate = false;
  GflowrlObjective unfiltered(c, testing::policy_tokenizer());
  const auto everything = unfiltered.loss(*model, all);
  EXPECT_EQ(everything.count.item<double>(), 12.0);
  EXPECT_GT(everything.loss_sum.item<double>(), with_degenerate.loss_sum.item<double>() + 1e-3);
}

// docs/rl.md, "Fixed point": on an enumerable space (vocabulary 3, completions of length 2, all nine forming the group)
// choose π_ref so that π_θ = π_ref·e^{βr}/Z exactly; then every residual vanishes with `none`, not with `paper`.
TEST(Gflowrl, TargetDistributionIsAFixedPointOnlyWithoutMixedNormalisation) {
  auto model = tiny_policy(3);
  std::vector<testing::RolloutRow> rows;
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 3; ++b) rows.push_back({{0}, {a, b}, a == b ? 1.0 : 0.25 * static_cast<double>(a), 0});
  Batch batch = rollout_batch(*model, rows);
  Config c = gflowrl_config("none");
  const double beta = c.gflowrl.beta;
  // π_ref(y) ∝ π_θ(y)·e^{−βr(y)}, normalised over the nine sequences (π_θ sums to 1 over them).
  const auto theta = batch.rollout.old_log_probs.sum(1);
  const auto unnormalised = theta - beta * batch.rollout.rewards;
  const auto ref_seq = unnormalised - torch::logsumexp(unnormalised, 0);
  EXPECT_NEAR(torch::logsumexp(theta, 0).item<double>(), 0.0, 1e-5);
  // Per-token values only matter through their sum: put the sequence's whole difference on its last token.
  batch.rollout.ref_log_probs = batch.rollout.old_log_probs.clone();
  batch.rollout.ref_log_probs.select(1, 2) += ref_seq - theta;

  GflowrlObjective at_fixed_point(c, testing::policy_tokenizer());
  EXPECT_NEAR(at_fixed_point.loss(*model, batch).loss_sum.item<double>(), 0.0, 1e-8);
  GflowrlObjective paper(gflowrl_config("paper"), testing::policy_tokenizer());
  EXPECT_GT(paper.loss(*model, batch).loss_sum.item<double>(), 1e-3);
}

}  // namespace
}  // namespace inkstone
