// The sweep's statistics (sweep/statistics.h) against textbook values: Student's sleep data (1908), whose paired
// t-test every statistics package reproduces (t = 4.0621, df = 9, p = 0.002833, 95% CI [0.7001, 2.4599]), and
// Holm's step-down on a fixed table.
#include <gtest/gtest.h>

#include <cmath>

#include "sweep/statistics.h"

namespace inkstone {
namespace {

const std::vector<double> kDrug1 = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
const std::vector<double> kDrug2 = {1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4};

TEST(SweepStatistics, SummaryIsMeanSampleSdAndTheTInterval) {
  const Summary s = summarize(kDrug1);
  EXPECT_EQ(s.n, 10);
  EXPECT_NEAR(s.mean, 0.75, 1e-12);
  EXPECT_NEAR(s.sd, 1.789010, 1e-6);
  EXPECT_NEAR(s.ci_low, -0.5297804, 1e-7);
  EXPECT_NEAR(s.ci_high, 2.0297804, 1e-7);
  const Summary one = summarize({3.0});
  EXPECT_EQ(one.sd, 0);
  EXPECT_EQ(one.ci_low, 3.0);
}

TEST(SweepStatistics, PairedTTestReproducesTheSleepData) {
  const PairedTest t = paired_t_test(kDrug2, kDrug1);
  EXPECT_EQ(t.n, 10);
  EXPECT_NEAR(t.mean_difference, 1.58, 1e-12);
  EXPECT_NEAR(t.t, 4.062128, 1e-6);
  EXPECT_NEAR(t.p, 0.002832890, 1e-8);
  EXPECT_NEAR(t.ci_low, 0.7001142, 1e-7);
  EXPECT_NEAR(t.ci_high, 2.4598858, 1e-7);
  EXPECT_EQ(paired_t_test({1, 2, 3}, {1, 2, 3}).p, 1.0);  // no spread: no evidence
  EXPECT_THROW(paired_t_test({1, 2}, {1}), std::invalid_argument);
}

TEST(SweepStatistics, BonferroniAndHolmAdjustInInputOrder) {
  const std::vector<double> p = {0.01, 0.04, 0.03, 0.005};
  const auto b = bonferroni(p);
  const auto h = holm(p);
  const std::vector<double> b_expected = {0.04, 0.16, 0.12, 0.02}, h_expected = {0.03, 0.06, 0.06, 0.02};
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_NEAR(b[i], b_expected[i], 1e-15) << i;
    EXPECT_NEAR(h[i], h_expected[i], 1e-15) << i;
  }
  EXPECT_EQ(bonferroni({0.5, 0.6}), (std::vector<double>{1.0, 1.0}));
}

// (t_{0.975, 9} + t_{0.8, 9}) / sqrt(10) = (2.262157 + 0.883404) / 3.162278
TEST(SweepStatistics, MinimumDetectableEffectFromTheTQuantiles) {
  EXPECT_NEAR(minimum_detectable_effect(1.0, 10, 0.05), (2.2621572 + 0.8834039) / std::sqrt(10.0), 1e-6);
  EXPECT_NEAR(minimum_detectable_effect(2.0, 10, 0.05), 2 * minimum_detectable_effect(1.0, 10, 0.05), 1e-12);
  EXPECT_TRUE(std::isinf(minimum_detectable_effect(1.0, 1, 0.05)));
}

}  // namespace
}  // namespace inkstone
