// Master weights (train/master_weights.h): what they are for, sub-ulp updates that bf16 weights alone lose, and the
// bookkeeping around the optimizer step.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "checkpoint/module_weights.h"
#include "core/errors.h"
#include "train/master_weights.h"
#include "train/optimizer.h"

namespace inkstone {
namespace {

OptimConfig sgd_like_adamw(double lr) {
  OptimConfig o;
  o.learning_rate = lr;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = 0;
  return o;
}

// AdamW's first steps move each weight by about lr (its update is m/sqrt(v) ~ sign(g)). With lr = 1e-3 on weights
// near 1, a bf16 step (2^-7 at 1) is 7.8x larger than the update, so bf16 weights stepped directly never move;
// with master weights the fp32 copies move 1e-3 per step and the bf16 weights follow their rounding.
TEST(MasterWeights, UpdatesSmallerThanABf16StepAccumulate) {
  const double lr = 1e-3;
  const int steps = 40;
  const auto start = torch::ones({64}) + torch::arange(64) / 256.0;  // in [1, 1.25): bf16 step 2^-7

  auto direct = start.to(torch::kBFloat16).requires_grad_(true);
  ParameterGroups direct_groups{{{"w", direct}}, {}};
  auto direct_adamw = make_adamw(direct_groups, sgd_like_adamw(lr));

  auto weight = start.to(torch::kBFloat16).requires_grad_(true);
  NamedTensors stepped{{"w", weight}};
  MasterWeights masters(stepped);
  masters.adopt_parameters();
  auto adamw = make_adamw(masters.optimized(ParameterGroups{stepped, {}}), sgd_like_adamw(lr));

  for (int k = 0; k < steps; ++k) {
    for (auto* p : {&direct, &weight}) p->mutable_grad() = torch::full({64}, -1.0, torch::kBFloat16);  // push up
    direct_adamw->step();
    masters.take_gradients();
    EXPECT_FALSE(weight.grad().defined());
    adamw->step();
    masters.write_back();
  }
  const torch::Tensor master = masters.optimized().front().second.detach();
  EXPECT_FALSE(master.grad().defined());
  EXPECT_EQ(master.scalar_type(), torch::kFloat);
  // The fp32 copy moved by steps x lr (AdamW's bias-corrected update is exactly lr for a constant gradient).
  EXPECT_LT((master - start.to(torch::kBFloat16).to(torch::kFloat) - steps * lr).abs().max().item<double>(), 1e-5);
  EXPECT_TRUE(torch::equal(weight.detach(), master.to(torch::kBFloat16)));
  EXPECT_GT((weight.detach().to(torch::kFloat) - start.to(torch::kBFloat16).to(torch::kFloat)).min().item<double>(),
            0.0);
  EXPECT_TRUE(torch::equal(direct.detach(), start.to(torch::kBFloat16)));  // bf16 alone: every update rounded away
}

// The checkpoint entries round-trip; fp32 tensors (an objective's own scalars) have no master copy; a missing
// entry names the parameter and the setting.
TEST(MasterWeights, CheckpointEntriesRoundTripAndFp32TensorsAreSteppedAsTheyAre) {
  auto weight = torch::randn({3, 4}).to(torch::kBFloat16).requires_grad_(true);
  auto scalar = torch::zeros({}).requires_grad_(true);
  NamedTensors stepped{{"w", weight}, {"log_z", scalar}};
  MasterWeights masters(stepped);
  EXPECT_TRUE(masters.optimized()[1].second.is_same(scalar));
  EXPECT_FALSE(masters.optimized()[0].second.is_same(weight));

  const auto exported = masters.export_values();
  ASSERT_EQ(exported.size(), 1u);
  EXPECT_EQ(exported[0].first, "w.master");
  NamedTensors changed{{"w.master", exported[0].second + 0.5}};
  masters.import_values(changed, "optimizer.safetensors");
  EXPECT_TRUE(torch::equal(masters.optimized()[0].second.detach(), changed[0].second));

  try {
    masters.import_values({}, "optimizer.safetensors");
    FAIL() << "a missing master weight was accepted";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("w.master"), std::string::npos) << message;
    EXPECT_NE(message.find("run.param_dtype"), std::string::npos) << message;
  }
}

TEST(MasterWeights, CastParametersKeepsTensorIdentityAndBuffers) {
  torch::nn::Linear linear(4, 3);
  linear->register_buffer("table", torch::ones({2}));
  const auto* before = linear->weight.unsafeGetTensorImpl();
  cast_parameters(*linear, torch::kBFloat16);
  EXPECT_EQ(linear->weight.unsafeGetTensorImpl(), before);
  EXPECT_EQ(linear->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(linear->bias.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(linear->named_buffers()["table"].scalar_type(), torch::kFloat);
}

}  // namespace
}  // namespace inkstone
