// The fused QK-norm and rotary embedding (models/kernels/qk_norm_rope.h) against the composite it replaced, written
// out here as the reference: x · (mean(x²) + ε)^(−1/2) ⊙ g, then x ⊙ cos + swap(x) ⊙ sin, autograd for the gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/fixtures.h"

#include "models/kernels/qk_norm_rope.h"
#include "models/rope.h"

namespace inkstone {
namespace {

constexpr double kNormEps = 1e-6;

torch::Tensor composite(const torch::Tensor& x, const torch::Tensor& weight, const RopeTable& table,
                        torch::ScalarType compute) {
  const auto wide = x.to(compute);
  const auto normed = wide * torch::rsqrt(wide.pow(2).mean(-1, true) + kNormEps) * weight.to(compute);
  const auto halves = normed.chunk(2, -1);
  const auto swapped = torch::cat({halves[1], halves[0]}, -1);
  return normed * table.cos.to(compute) + swapped * table.sin.to(compute);
}

// q as the attention forms it: the first H·h_d columns of a joint [B, T, (H + 2)·h_d] projection, seen as
// [B, H, T, h_d] (no copy; rows strided).
torch::Tensor projection_view(int64_t batch, int64_t heads, int64_t time, int64_t head_dim, torch::ScalarType dtype) {
  const auto joint = (torch::randn({batch, time, (heads + 2) * head_dim}) * 2 + 0.5).to(dtype);
  return joint.narrow(-1, 0, heads * head_dim).view({batch, time, heads, head_dim}).transpose(1, 2);
}

struct Result {
  torch::Tensor out, grad_x, grad_weight;
};

template <typename Op>
Result run_with_gradient(const torch::Tensor& x_in, const torch::Tensor& weight_in, const torch::Tensor& upstream,
                         Op op) {
  auto x = x_in.detach().clone().requires_grad_(true);
  auto weight = weight_in.detach().clone().requires_grad_(true);
  const auto out = op(x, weight);
  (out.to(torch::kDouble) * upstream).sum().backward();
  return {out.detach(), x.grad(), weight.grad()};
}

void expect_near_oracle(torch::ScalarType dtype, int64_t table_batch, double tolerance) {
  torch::manual_seed(7);
  const int64_t batch = 2, heads = 3, time = 5, head_dim = 16;
  const auto x = projection_view(batch, heads, time, head_dim, dtype);
  const auto weight = (torch::rand({head_dim}) + 0.5).to(dtype);
  const auto table = rope_table(torch::randint(0, 40000, {table_batch, time}, torch::kLong), head_dim, 1e4);
  const auto upstream = torch::randn({batch, heads, time, head_dim}, torch::kDouble);
  const auto fused = run_with_gradient(x, weight, upstream, [&](const torch::Tensor& t, const torch::Tensor& g) {
    return fused_qk_norm_rope(t, g, kNormEps, table.cos, table.sin);
  });
  const auto oracle = run_with_gradient(x.to(torch::kDouble), weight.to(torch::kDouble), upstream,
                                        [&](const torch::Tensor& t, const torch::Tensor& g) {
                                          return composite(t, g, table, torch::kDouble);
                                        });
  EXPECT_LT(testing::max_relative_diff(fused.out, oracle.out), tolerance) << dtype << " table batch " << table_batch;
  EXPECT_LT(testing::max_relative_diff(fused.grad_x, oracle.grad_x), tolerance) << dtype << " table batch " << table_batch;
  EXPECT_LT(testing::max_relative_diff(fused.grad_weight, oracle.grad_weight), tolerance) << dtype;
  EXPECT_EQ(fused.out.scalar_type(), dtype);
  EXPECT_EQ(fused.grad_x.scalar_type(), dtype);
  EXPECT_EQ(fused.grad_weight.scalar_type(), dtype);
}

TEST(FusedQkNormRope, Float64EqualsTheCompositeForwardAndGradients) {
  expect_near_oracle(torch::kDouble, 2, 1e-13);
  expect_near_oracle(torch::kDouble, 1, 1e-13);
}

TEST(FusedQkNormRope, Float32IsWithinRoundingOfTheFloat64Oracle) {
  expect_near_oracle(torch::kFloat, 2, 1e-6);
  expect_near_oracle(torch::kFloat, 1, 1e-6);
}

// bf16 rows are computed in float32 and rounded once (the composite rounded the normalised copy, then the rotation).
TEST(FusedQkNormRope, Bf16IsWithinOneRoundingOfTheOracle) { expect_near_oracle(torch::kBFloat16, 2, 1e-2); }

// More rows than weight-gradient chunks, so chunks hold several rows: the sums do not depend on the thread count.
TEST(FusedQkNormRope, WeightGradientDoesNotDependOnTheThreadCount) {
  torch::manual_seed(8);
  const auto x = projection_view(3, 4, 200, 8, torch::kFloat);
  const auto weight = torch::rand({8}) + 0.5;
  const auto table = rope_table(torch::arange(200, torch::kLong).view({1, 200}), 8, 1e4);
  const auto upstream = torch::randn({3, 4, 200, 8}, torch::kDouble);
  const auto op = [&](const torch::Tensor& t, const torch::Tensor& g) {
    return fused_qk_norm_rope(t, g, kNormEps, table.cos, table.sin);
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = run_with_gradient(x, weight, upstream, op);
  at::set_num_threads(std::max(2, threads));
  const auto many = run_with_gradient(x, weight, upstream, op);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one.grad_weight, many.grad_weight));
  EXPECT_TRUE(torch::equal(one.grad_x, many.grad_x));
  const auto oracle = run_with_gradient(x.to(torch::kDouble), weight.to(torch::kDouble), upstream,
                                        [&](const torch::Tensor& t, const torch::Tensor& g) {
                                          return composite(t, g, table, torch::kDouble);
                                        });
  EXPECT_LT(testing::max_relative_diff(one.grad_weight, oracle.grad_weight), 1e-5);
}

TEST(FusedQkNormRope, RefusesWhatItCannotTake) {
  const auto table = rope_table(torch::zeros({1, 4}, torch::kLong), 8, 1e4);
  const auto weight = torch::ones({8});
  EXPECT_THROW(fused_qk_norm_rope(torch::zeros({1, 2, 4, 8}, torch::kInt), weight, kNormEps, table.cos, table.sin),
               c10::Error);
  EXPECT_THROW(fused_qk_norm_rope(torch::zeros({1, 2, 5, 8}), weight, kNormEps, table.cos, table.sin), c10::Error);
  EXPECT_THROW(fused_qk_norm_rope(torch::zeros({1, 2, 4, 8}), torch::ones({6}), kNormEps, table.cos, table.sin),
               c10::Error);
  EXPECT_FALSE(fused_qk_norm_rope_applies(torch::zeros({1, 1, 1, 1024})));  // wider than the kernels hold
}

}  // namespace
}  // namespace inkstone
