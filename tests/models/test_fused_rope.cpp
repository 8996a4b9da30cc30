// The fused rotary embedding (models/kernels/rope.h) against the composite it replaced, written out here as the
// reference: x ⊙ cos + swap(x) ⊙ sin in float32, autograd for the gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/kernels/rope.h"
#include "models/rope.h"

namespace inkstone {
namespace {

constexpr double kRopeTheta = 10000.0;

torch::Tensor composite_rope(const torch::Tensor& x, const RopeTable& table, torch::ScalarType compute) {
  const auto wide = x.to(compute);
  const auto halves = wide.chunk(2, -1);
  const auto swapped = torch::cat({halves[1], halves[0]}, -1);
  return (wide * table.cos.to(compute) + swapped * table.sin.to(compute)).to(x.scalar_type());
}

// q as the attention forms it: [B, T, H, h_d] storage seen as [B, H, T, h_d].
torch::Tensor per_head_view(int64_t batch, int64_t heads, int64_t time, int64_t head_dim, torch::ScalarType dtype) {
  return torch::randn({batch, time, heads, head_dim}).to(dtype).transpose(1, 2);
}

struct Rotation {
  torch::Tensor out, grad;
};

// Forward and gradient of sum(w ⊙ rope(x)) for a fixed w, by either implementation.
template <typename Rope>
Rotation rotate_with_gradient(const torch::Tensor& x_in, const torch::Tensor& weights, Rope rope) {
  auto x = x_in.detach().clone().requires_grad_(true);
  auto out = rope(x);
  (out.to(torch::kDouble) * weights).sum().backward();
  return {out.detach(), x.grad()};
}

void expect_fused_equals_composite(torch::ScalarType dtype, int64_t table_batch) {
  torch::manual_seed(3);
  const auto x = per_head_view(2, 3, 5, 8, dtype);
  const auto table = rope_table(torch::randint(0, 40000, {table_batch, 5}, torch::kLong), 8, kRopeTheta);
  const auto weights = torch::randn({2, 3, 5, 8}, torch::kDouble);
  const auto fused = rotate_with_gradient(x, weights, [&](const torch::Tensor& t) { return apply_rope(t, table); });
  const auto composite =
      rotate_with_gradient(x, weights, [&](const torch::Tensor& t) { return composite_rope(t, table, torch::kFloat); });
  EXPECT_TRUE(torch::equal(fused.out, composite.out)) << dtype << " table batch " << table_batch;
  EXPECT_TRUE(torch::equal(fused.grad, composite.grad)) << dtype << " table batch " << table_batch;
  EXPECT_EQ(fused.out.scalar_type(), dtype);
  EXPECT_EQ(fused.out.strides(), x.strides()) << "the result keeps x's layout";
}

TEST(FusedRope, Float32EqualsTheCompositeBitForBit) {
  expect_fused_equals_composite(torch::kFloat, 2);
  expect_fused_equals_composite(torch::kFloat, 1);
}

TEST(FusedRope, Bf16EqualsTheCompositeBitForBit) {
  expect_fused_equals_composite(torch::kBFloat16, 2);
  expect_fused_equals_composite(torch::kBFloat16, 1);
}

TEST(FusedRope, Float64RotatesInFloat64AndItsGradientIsTheTranspose) {
  torch::manual_seed(4);
  const auto x = per_head_view(1, 2, 7, 16, torch::kDouble);
  const auto table = rope_table(torch::arange(7, torch::kLong).view({1, 7}) * 5000, 16, kRopeTheta);
  const auto weights = torch::randn({1, 2, 7, 16}, torch::kDouble);
  const auto fused = rotate_with_gradient(x, weights, [&](const torch::Tensor& t) { return apply_rope(t, table); });
  const auto composite = rotate_with_gradient(
      x, weights, [&](const torch::Tensor& t) { return composite_rope(t, table, torch::kDouble); });
  EXPECT_TRUE(torch::equal(fused.out, composite.out));
  EXPECT_TRUE(torch::equal(fused.grad, composite.grad));
  // A rotation's transpose undoes it (up to the float32 tables' cos² + sin² ≠ 1 by a few ulps): Rᵀ R x = x.
  auto again = x.detach().clone().requires_grad_(true);
  const auto rotated = apply_rope(again, table);
  rotated.backward(rotated.detach());
  EXPECT_LT((again.grad() - x).abs().max().item<double>(), 1e-6);
}

// A gradient of zero strides (sum().backward() hands one expanded scalar) and a table shared by the batch.
TEST(FusedRope, TakesAnExpandedGradient) {
  torch::manual_seed(5);
  const auto x = per_head_view(2, 3, 5, 8, torch::kFloat);
  const auto table = rope_table(torch::randint(0, 4000, {1, 5}, torch::kLong), 8, kRopeTheta);
  const auto gradient = [&](bool fused) {
    auto leaf = x.detach().clone().requires_grad_(true);
    (fused ? apply_rope(leaf, table) : composite_rope(leaf, table, torch::kFloat)).sum().backward();
    return leaf.grad();
  };
  EXPECT_TRUE(torch::equal(gradient(true), gradient(false)));
}

TEST(FusedRope, RefusesWhatItCannotRotate) {
  const auto table = rope_table(torch::zeros({1, 4}, torch::kLong), 8, kRopeTheta);
  EXPECT_THROW(fused_rope(torch::zeros({1, 2, 4, 7}), table.cos, table.sin), c10::Error);               // odd h_d
  EXPECT_THROW(fused_rope(torch::zeros({1, 2, 5, 8}), table.cos, table.sin), c10::Error);               // T mismatch
  EXPECT_THROW(fused_rope(torch::zeros({2, 2, 4, 8}, torch::kInt), table.cos, table.sin), c10::Error);  // dtype
  EXPECT_THROW(fused_rope(torch::zeros({1, 2, 4, 8}), table.cos.to(torch::kDouble), table.sin), c10::Error);
  const auto wide = rope_table(torch::zeros({3, 4}, torch::kLong), 8, kRopeTheta);
  EXPECT_THROW(fused_rope(torch::zeros({2, 2, 4, 8}), wide.cos, wide.sin), c10::Error);  // table batch 3 for B 2
}

}  // namespace
}  // namespace inkstone
