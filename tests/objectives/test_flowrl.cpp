// FlowRL (docs/rl.md, "FlowRL"): the loss against its residual written out, the one-sided weight cap, and
// gradients reaching both the log Z head and the backbone.
#include <gtest/gtest.h>

#include "config/config.h"
#include "objectives/flowrl.h"
#include "tests/objectives/rollout_fixtures.h"

namespace inkstone {
namespace {

constexpr int64_t kFlowrlVocab = 13;

struct FlowrlCase {
  LanguageModel model{nullptr};
  Batch batch;
  Config config;
};

FlowrlCase flowrl_case() {
  FlowrlCase s{testing::tiny_policy(kFlowrlVocab), {}, default_config()};
  s.config.objective.name = "flowrl";
  s.config.model = testing::tiny_policy_config();
  s.config.flowrl.is_cap = 1.5;
  s.batch = testing::rollout_batch(*s.model, testing::random_rows(2, 4, kFlowrlVocab, {1, 0, 0, 1, 0.5, 0, 1, 1}, 12));
  const auto policy = s.batch.rollout.policy.to(torch::kFloat);
  torch::manual_seed(13);
  s.batch.rollout.ref_log_probs = s.batch.rollout.old_log_probs + 0.3 * torch::randn_like(policy) * policy;
  s.batch.rollout.old_log_probs = s.batch.rollout.old_log_probs + 0.5 * torch::randn_like(policy) * policy;
  return s;
}

TEST(Flowrl, LossIsTheCappedWeightedSquaredResidual) {
  FlowrlCase s = flowrl_case();
  torch::manual_seed(1);
  FlowrlObjective objective(s.config, testing::policy_tokenizer());
  objective.trainable()->eval();  // no dropout: the head is a fixed function here
  const auto out = objective.loss(*s.model, s.batch);

  const auto policy = policy_log_probs(*s.model, s.batch, 1.0, /*logit_chunk_mib=*/256, false, true);
  const auto theta = policy.log_probs.sum(1);
  const auto old = s.batch.rollout.old_log_probs.sum(1);
  const auto ref = s.batch.rollout.ref_log_probs.sum(1);
  const auto lengths = s.batch.rollout.policy.sum(1).to(torch::kFloat);
  const auto r = s.batch.rollout.rewards.view({2, 4});
  const auto z_scored = ((r - r.mean(1, true)) / (r.std(1, /*unbiased=*/true, true) + 1e-6)).reshape(-1);
  const auto delta = objective.log_z(policy.hidden, s.batch) + theta / lengths - 15.0 * z_scored - ref / lengths;
  const auto w = torch::minimum((theta - old).exp(), torch::full_like(theta, 1.5));
  EXPECT_LT(w.min().item<double>(), 1.5);
  EXPECT_NEAR(w.max().item<double>(), 1.5, 1e-6);  // some weights are capped
  EXPECT_NEAR(out.loss_sum.item<double>(), (w * delta.square()).sum().item<double>(), 1e-3);
  EXPECT_EQ(out.count.item<double>(), 8.0);
}

TEST(Flowrl, GradientReachesTheLogZHeadAndTheBackbone) {
  FlowrlCase s = flowrl_case();
  FlowrlObjective objective(s.config, testing::policy_tokenizer());
  objective.loss(*s.model, s.batch).loss_sum.backward();
  for (const auto& p : objective.trainable()->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0);
  }
  EXPECT_GT(s.model->embed->weight.grad().abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace inkstone
