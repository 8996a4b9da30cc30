// rl.* as options: the pass@k estimator of the held-out evaluation and the weighted reward specs.
#include <gtest/gtest.h>

#include "config/config.h"
#include "rl/policy_eval.h"
#include "rl/rl_options.h"

namespace inkstone {
namespace {

TEST(PassAtK, UnbiasedEstimatorMatchesTheBinomialForm) {
  // 1 − C(n−c, k)/C(n, k) by direct counting for n = 8, c = 3.
  auto binomial = [](int n, int k) {
    double b = 1;
    for (int i = 1; i <= k; ++i) b = b * (n - k + i) / i;
    return b;
  };
  for (int k = 1; k <= 8; ++k)
    EXPECT_NEAR(pass_at_k(8, 3, k), 1.0 - binomial(5, k) / binomial(8, k), 1e-12) << k;
  EXPECT_DOUBLE_EQ(pass_at_k(8, 3, 1), 3.0 / 8);
  EXPECT_DOUBLE_EQ(pass_at_k(8, 0, 4), 0.0);
  EXPECT_DOUBLE_EQ(pass_at_k(8, 6, 4), 1.0);
}

TEST(RewardSpec, NamesWithOptionalWeights) {
  RlConfig rl = default_config().rl;
  rl.rewards = {"correct", "format=0.25"};
  const auto rewards = weighted_rewards(rl);
  ASSERT_EQ(rewards.size(), 2u);
  EXPECT_EQ(rewards[1].function->name(), "format");
  EXPECT_DOUBLE_EQ(rewards[1].weight, 0.25);
  rl.rewards = {"correct=x"};
  EXPECT_ANY_THROW(weighted_rewards(rl));
}

}  // namespace
}  // namespace inkstone
