// The fused SwiGLU gating (models/kernels/swiglu.h) and the joint projections (models/joint_linear.h) against the
// composites they replaced, written out here as the reference: SiLU(g) ⊙ u, and one torch::linear per weight.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/fixtures.h"

#include "models/joint_linear.h"
#include "models/kernels/swiglu.h"

namespace inkstone {
namespace {

torch::Tensor composite_swiglu(const torch::Tensor& gate_up) {
  const auto halves = gate_up.chunk(2, -1);
  return torch::silu(halves[0]) * halves[1];
}

struct Gated {
  torch::Tensor out, grad;
};

// Forward and gradient of Σ w ⊙ f(gate_up) for a fixed w.
template <typename Gate>
Gated gated_with_gradient(const torch::Tensor& gate_up, const torch::Tensor& weights, Gate gate) {
  auto leaf = gate_up.detach().clone().requires_grad_(true);
  const auto out = gate(leaf);
  (out.to(torch::kDouble) * weights).sum().backward();
  return {out.detach(), leaf.grad()};
}

// The same by the row code the GPU kernel runs (its CPU twin).
Gated row_code_with_gradient(const torch::Tensor& gate_up, const torch::Tensor& weights) {
  const auto twin = swiglu_row_code_on_cpu(gate_up, weights.to(gate_up.scalar_type()));
  return {twin.hidden, twin.grad_gate_up};
}

// The op and the twin, each with its gradient.
std::array<Gated, 2> both_forms(const torch::Tensor& gate_up, const torch::Tensor& weights) {
  return {gated_with_gradient(gate_up, weights, fused_swiglu), row_code_with_gradient(gate_up, weights)};
}

TEST(FusedSwiglu, Float64EqualsTheCompositeForwardAndGradient) {
  torch::manual_seed(1);
  const auto gate_up = torch::randn({3, 5, 2 * 24}, torch::kDouble) * 3;
  const auto weights = torch::randn({3, 5, 24}, torch::kDouble);
  const auto composite = gated_with_gradient(gate_up, weights, composite_swiglu);
  for (const auto& fused : both_forms(gate_up, weights)) {
    EXPECT_LT(testing::max_relative_diff(fused.out, composite.out), 1e-14);
    EXPECT_LT(testing::max_relative_diff(fused.grad, composite.grad), 1e-14);
    EXPECT_EQ(fused.out.sizes(), (std::vector<int64_t>{3, 5, 24}));
  }
}

TEST(FusedSwiglu, Float32IsWithinRoundingOfTheFloat64Oracle) {
  torch::manual_seed(2);
  const auto gate_up = torch::randn({64, 2 * 40}) * 4;
  const auto weights = torch::randn({64, 40}, torch::kDouble);
  const auto oracle = gated_with_gradient(gate_up.to(torch::kDouble), weights, composite_swiglu);
  for (const auto& fused : both_forms(gate_up, weights)) {
    EXPECT_LT(testing::max_relative_diff(fused.out, oracle.out), 1e-6);
    EXPECT_LT(testing::max_relative_diff(fused.grad, oracle.grad), 1e-6);
    EXPECT_EQ(fused.out.scalar_type(), torch::kFloat);
    EXPECT_EQ(fused.grad.scalar_type(), torch::kFloat);
  }
}

// The twin computes bf16 rows in float32 and rounds once: every output within half a bf16 ulp (≤ 2⁻⁸ relative) of
// the float64 value of the same bf16 inputs, plus float32's own error (relative to the largest value: the gradient's
// 1 + g (1 − σ(g)) cancels near g = −1.28). The CPU op computes bf16 rows in float32 through ATen and rounds once
// too; its vectorised exp may differ from the C library's by ulps of float32.
TEST(FusedSwiglu, Bf16RoundsOnceFromFloat32) {
  torch::manual_seed(3);
  const auto gate_up = (torch::randn({32, 2 * 48}) * 3).to(torch::kBFloat16);
  const auto weights = torch::randn({32, 48}, torch::kDouble);
  const auto oracle = gated_with_gradient(gate_up.to(torch::kDouble), weights, composite_swiglu);
  // The gradient's bf16 incoming values differ from the float64 weights, so compare against the exact gradient of
  // the bf16-rounded incoming gradient.
  auto leaf = gate_up.to(torch::kDouble).requires_grad_(true);
  composite_swiglu(leaf).backward(weights.to(torch::kBFloat16).to(torch::kDouble));
  const auto within = [](const torch::Tensor& got, const torch::Tensor& want, double ulps) {
    const auto bound = want.abs() * ulps * std::ldexp(1.0, -8) + want.abs().max() * 1e-6;
    return (got.to(torch::kDouble) - want).abs().le(bound).all().item<bool>();
  };
  const auto [op, twin] = both_forms(gate_up, weights);
  EXPECT_TRUE(within(twin.out, oracle.out, 1));
  EXPECT_TRUE(within(twin.grad, leaf.grad(), 1));
  EXPECT_TRUE(within(op.out, oracle.out, 1));
  EXPECT_TRUE(within(op.grad, leaf.grad(), 1));
}

TEST(FusedSwiglu, RefusesWhatItCannotGate) {
  EXPECT_THROW(fused_swiglu(torch::zeros({2, 7})), c10::Error);                  // odd width
  EXPECT_THROW(fused_swiglu(torch::zeros({2, 8}, torch::kInt)), c10::Error);    // dtype
}

struct Projected {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;  // x, the weights, the biases
};

template <typename Project>
Projected projected_with_gradient(const torch::Tensor& x_in, const std::vector<torch::Tensor>& weights_in,
                                  const std::vector<torch::Tensor>& biases_in, const torch::Tensor& upstream,
                                  Project project) {
  auto x = x_in.detach().clone().requires_grad_(true);
  std::vector<torch::Tensor> weights, biases;
  for (const auto& w : weights_in) weights.push_back(w.detach().clone().requires_grad_(true));
  for (const auto& b : biases_in) biases.push_back(b.detach().clone().requires_grad_(true));
  const auto out = project(x, weights, biases);
  (out * upstream).sum().backward();
  Projected result{out.detach(), {x.grad()}};
  for (const auto& w : weights) result.grads.push_back(w.grad());
  for (const auto& b : biases) result.grads.push_back(b.grad());
  return result;
}

torch::Tensor separate_products(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                const std::vector<torch::Tensor>& biases) {
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < weights.size(); ++i)
    parts.push_back(torch::linear(x, weights[i], biases.empty() ? torch::Tensor() : biases[i]));
  return torch::cat(parts, -1);
}

// The joined product equals one linear per weight, forward and every gradient, with and without biases; without
// gradient, below as many rows as features, the separate products give the same values.
TEST(JointLinear, EqualsOneLinearPerWeightInFloat64) {
  torch::manual_seed(4);
  const int64_t features = 6;
  const std::vector<torch::Tensor> weights{torch::randn({8, features}, torch::kDouble),
                                           torch::randn({4, features}, torch::kDouble),
                                           torch::randn({4, features}, torch::kDouble)};
  const std::vector<torch::Tensor> biases{torch::randn({8}, torch::kDouble), torch::randn({4}, torch::kDouble),
                                          torch::randn({4}, torch::kDouble)};
  for (const int64_t time : {1, 9})  // 2 rows and 18 rows
    for (const bool with_bias : {false, true}) {
      const auto x = torch::randn({2, time, features}, torch::kDouble);
      const auto upstream = torch::randn({2, time, 16}, torch::kDouble);
      const std::vector<torch::Tensor> used_biases = with_bias ? biases : std::vector<torch::Tensor>{};
      const auto joint = projected_with_gradient(x, weights, used_biases, upstream, joint_linear);
      const auto reference = projected_with_gradient(x, weights, used_biases, upstream, separate_products);
      EXPECT_LT((joint.out - reference.out).abs().max().item<double>(), 1e-12) << time << " " << with_bias;
      ASSERT_EQ(joint.grads.size(), reference.grads.size());
      for (size_t i = 0; i < joint.grads.size(); ++i)
        EXPECT_LT((joint.grads[i] - reference.grads[i]).abs().max().item<double>(), 1e-12)
            << "gradient " << i << " at T " << time << " bias " << with_bias;
      torch::NoGradGuard no_grad;
      EXPECT_LT((joint_linear(x, weights, used_biases) - separate_products(x, weights, used_biases)).abs().max().item<double>(),
                1e-12);
    }
}

}  // namespace
}  // namespace inkstone
