// Learning-rate schedules against hand-computed values; parameter groups; gradient clipping.
#include <gtest/gtest.h>

#include <cmath>

#include <torch/torch.h>

#include "config/config.h"
#include "core/torch_compat.h"
#include "tests/fixtures.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace inkstone {
namespace {

ScheduleConfig schedule(const std::string& kind, int64_t warmup, double min_ratio, double decay_fraction = 0.2) {
  ScheduleConfig s = default_config().schedule;
  s.kind = choice_named<LrScheduleKind>(kind).value();
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

// Three parameters in a decaying and a non-decaying group, with AdamW of lr 1e-2 and weight decay 0.1.
struct AdamWFixture {
  std::vector<torch::Tensor> params;
  std::vector<torch::optim::OptimizerParamGroup> groups() const {
    auto options = [](double decay) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(decay));
    };
    return {torch::optim::OptimizerParamGroup({params[0], params[2]}, options(0.1)),
            torch::optim::OptimizerParamGroup({params[1]}, options(0.0))};
  }
  static AdamWFixture make() {
    torch::manual_seed(11);
    return {{torch::randn({16, 12}).requires_grad_(), torch::randn({12}).requires_grad_(),
             torch::randn({5, 3}).requires_grad_()}};
  }
  void set_gradients(int64_t step) {
    for (size_t i = 0; i < params.size(); ++i) {
      torch::manual_seed(static_cast<uint64_t>(100 * step + static_cast<int64_t>(i)));
      params[i].mutable_grad() = torch::randn_like(params[i]) * static_cast<double>(i + 1);
    }
  }
};

int64_t host_step_count(torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  return static_cast<torch::optim::AdamWParamState&>(*optimizer.state().at(compat::optimizer_state_key(p))).step();
}

// Where libtorch has the fused kernel for the CPU (2.4+), inkstone's AdamW steps with it: the update libtorch's
// per-parameter AdamW makes, step after step, within float32 rounding.
TEST(Optimizer, TheFusedStepMakesThePerParameterUpdate) {
  if (!compat::has_fused_adamw(torch::kCPU)) GTEST_SKIP() << "this libtorch has no fused AdamW for the CPU";
  auto fused = AdamWFixture::make(), reference = AdamWFixture::make();
  AdamW fused_adamw(fused.groups(), torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW reference_adamw(reference.groups(), torch::optim::AdamWOptions(1e-2));
  ASSERT_TRUE(fused_adamw.runs_fused_kernel());
  for (int64_t step = 0; step < 6; ++step) {
    fused.set_gradients(step);
    reference.set_gradients(step);
    fused_adamw.step();
    reference_adamw.step();
    for (size_t i = 0; i < fused.params.size(); ++i)
      EXPECT_LT(testing::max_relative_diff(fused.params[i].detach(), reference.params[i].detach()), 1e-6)
          << "step " << step << " parameter " << i;
  }
  EXPECT_EQ(host_step_count(fused_adamw, fused.params[0]), 6);
}

// A step skipped on the device leaves weights and moments as they were; once the host takes its count back, the
// run continues exactly as one that never saw the skipped gradients.
TEST(Optimizer, AStepSkippedOnTheDeviceIsAsIfItNeverHappened) {
  if (!compat::has_fused_adamw(torch::kCPU)) GTEST_SKIP() << "this libtorch has no fused AdamW for the CPU";
  auto skipping = AdamWFixture::make(), straight = AdamWFixture::make();
  AdamW skipping_adamw(skipping.groups(), torch::optim::AdamWOptions(1e-2));
  AdamW straight_adamw(straight.groups(), torch::optim::AdamWOptions(1e-2));
  for (int64_t step = 0; step < 2; ++step) {
    skipping.set_gradients(step);
    straight.set_gradients(step);
    skipping_adamw.step_unless(torch::zeros({}));
    straight_adamw.step();
  }
  std::vector<torch::Tensor> before;
  for (const auto& p : skipping.params) before.push_back(p.detach().clone());
  skipping.set_gradients(99);
  const auto counted = skipping_adamw.step_unless(torch::ones({}));
  EXPECT_EQ(counted.size(), 3u);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(skipping.params[i].detach(), before[i]));
  EXPECT_EQ(host_step_count(skipping_adamw, skipping.params[0]), 3);  // not yet told
  skipping_adamw.uncount(counted);
  EXPECT_EQ(host_step_count(skipping_adamw, skipping.params[0]), 2);
  for (int64_t step = 2; step < 5; ++step) {
    skipping.set_gradients(step);
    straight.set_gradients(step);
    skipping_adamw.step_unless(torch::zeros({}));
    straight_adamw.step();
  }
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(torch::equal(skipping.params[i].detach(), straight.params[i].detach())) << "parameter " << i;
  EXPECT_EQ(host_step_count(skipping_adamw, skipping.params[1]), 5);
}

}  // namespace
}  // namespace inkstone
