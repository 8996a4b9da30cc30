// Learning-rate schedules against hand-computed values; parameter groups; gradient clipping.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "config/config.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace inkstone {
namespace {

ScheduleConfig schedule(const std::string& kind, int64_t warmup, double min_ratio, double decay_fraction = 0.2) {
  ScheduleConfig s = default_config().schedule;
  s.kind = kind;
  s.warmup_steps = warmup;
  s.min_lr_ratio = min_ratio;
  s.decay_fraction = decay_fraction;
  return s;
}

TEST(Schedule, WarmupIsLinearFromTheFirstStep) {
  auto s = schedule("cosine", 4, 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 0, 100), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 1, 100), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 3, 100), 1.0);
}

TEST(Schedule, CosineGoesFromPeakToMinimum) {
  auto s = schedule("cosine", 10, 0.1);
  // After warmup, steps 10..99 span progress 0..1 over 89 intervals.
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 2.0, 10, 100), 2.0);
  EXPECT_NEAR(learning_rate_at(s, 2.0, 99, 100), 0.2, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 2.0, 54, 100),
              0.2 + 1.8 * 0.5 * (1 + std::cos(M_PI * (54 - 10) / 89.0)), 1e-12);
}

TEST(Schedule, WarmupStableDecay) {
  auto s = schedule("wsd", 10, 0.0, 0.2);  // decay over the last 20 of 100 steps: 80..99
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 50, 100), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 79, 100), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 1.0, 80, 100), 1.0);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 99, 100), 0.0, 1e-12);
  EXPECT_NEAR(learning_rate_at(s, 1.0, 89, 100), 1.0 - 9.0 / 19.0, 1e-12);
}

TEST(Schedule, ConstantAfterWarmup) {
  auto s = schedule("constant", 2, 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 3.0, 0, 10), 1.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(s, 3.0, 9, 10), 3.0);
}

TEST(Optimizer, ParameterRolesFromNames) {
  EXPECT_EQ(parameter_role("blocks.0.attn_norm.weight"), "norm");
  EXPECT_EQ(parameter_role("blocks.0.attn.q_norm.weight"), "norm");
  EXPECT_EQ(parameter_role("embed.weight"), "embedding");
  EXPECT_EQ(parameter_role("blocks.1.mlp.up.bias"), "bias");
  EXPECT_EQ(parameter_role("blocks.1.mlp.up.weight"), "");
}

TEST(Optimizer, ClippingScalesToTheBoundAndReportsThePreClipNorm) {
  auto a = torch::zeros({2}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  auto norm = clip_grad_norm({a, b}, 1.0);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-6);
  EXPECT_NEAR(b.grad()[0].item<double>(), 0.8, 1e-6);
  // Below the bound nothing changes.
  auto norm2 = clip_grad_norm({a, b}, 10.0);
  EXPECT_NEAR(norm2.item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-6);
}

TEST(Optimizer, AllFiniteSeesEveryNonFiniteElementAndNoHugeFiniteOne) {
  const auto big = torch::full({3}, 1e30f);  // its sum of squares overflows float32; it is finite all the same
  EXPECT_TRUE(all_finite({big, torch::ones({2, 2})}).item<bool>());
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    auto planted = torch::ones({4, 5});
    planted[3][1] = bad;
    EXPECT_FALSE(all_finite({big, planted}).item<bool>()) << bad;
  }
  EXPECT_TRUE(all_finite({}).item<bool>());
}

}  // namespace
}  // namespace inkstone
