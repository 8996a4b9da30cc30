// The fused routing read's CPU twin (models/kernels/route_sources.h) against the composite route_sources: the
// same output and the same gradients for sources (each read in place), pseudo-query and key-norm gain, in float64
// (to 1e-12) and float32, for AttnRes (H = 1) and MHAR (H = 4).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/kernels/route_sources.h"
#include "models/residual_routing.h"

namespace inkstone {
namespace {

struct Grads {
  torch::Tensor out, sources, query, gain;
};

Grads run(bool fused, const torch::Tensor& sources_in, const torch::Tensor& query_in, const torch::Tensor& gain_in,
          const torch::Tensor& grad_out, int64_t heads) {
  auto sources = sources_in.clone().requires_grad_(true);
  auto query = query_in.clone().requires_grad_(true);
  auto gain = gain_in.clone().requires_grad_(true);
  const auto out = fused ? fused_route_sources(sources.unbind(0), query, gain, 1e-6, heads)
                         : route_sources(sources, query, gain, 1e-6, heads);
  out.backward(grad_out);
  return {out.detach(), sources.grad(), query.grad(), gain.grad()};
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double tolerance, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_LT((a - b).abs().max().item<double>(), tolerance * scale) << what;
}

void compare(torch::ScalarType dtype, int64_t heads, double tolerance) {
  torch::manual_seed(heads * 7 + (dtype == torch::kDouble));
  const int64_t S = 5, B = 2, T = 3, d = 16;
  const auto options = torch::TensorOptions().dtype(dtype);
  const auto sources = torch::randn({S, B, T, d}, options) * torch::linspace(0.5, 2.0, S, options).view({S, 1, 1, 1});
  const auto query = torch::randn({d}, options);
  const auto gain = 1.0 + 0.3 * torch::randn({d}, options);
  const auto grad_out = torch::randn({B, T, d}, options);
  const auto composite = run(false, sources, query, gain, grad_out, heads);
  const auto fused = run(true, sources, query, gain, grad_out, heads);
  expect_close(fused.out, composite.out, tolerance, "output");
  expect_close(fused.sources, composite.sources, tolerance, "d sources");
  expect_close(fused.query, composite.query, tolerance, "d query");
  expect_close(fused.gain, composite.gain, tolerance, "d gain");
}

TEST(FusedRouting, AttnResMatchesTheCompositeInFloat64) { compare(torch::kDouble, 1, 1e-12); }
TEST(FusedRouting, MharMatchesTheCompositeInFloat64) { compare(torch::kDouble, 4, 1e-12); }
TEST(FusedRouting, MharMatchesTheCompositeInFloat32) { compare(torch::kFloat, 4, 2e-5); }

// At initialisation the pseudo-query is zero: the read is the uniform mean of the sources.
TEST(FusedRouting, AZeroQueryReadsTheMeanOfTheSources) {
  torch::manual_seed(2);
  const auto sources = torch::randn({4, 1, 2, 8}, torch::kDouble);
  const auto out = fused_route_sources(sources.unbind(0), torch::zeros({8}, torch::kDouble),
                                       torch::ones({8}, torch::kDouble), 1e-6, 2);
  EXPECT_LT((out - sources.mean(0)).abs().max().item<double>(), 1e-15);
}

// A delta site's null source is one [d] parameter expanded over the positions: its gradient sums the positions'.
TEST(FusedRouting, AnExpandedSourceGetsTheSummedGradient) {
  torch::manual_seed(9);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const auto others = torch::randn({2, 2, 3, 8}, options);
  const auto query = torch::randn({8}, options), gain = torch::ones({8}, options);
  const auto grad_out = torch::randn({2, 3, 8}, options);
  torch::Tensor grads[2];
  for (const bool fused : {false, true}) {
    torch::manual_seed(10);
    const auto null_source = torch::randn({8}, options).requires_grad_(true);
    std::vector<torch::Tensor> sources = {null_source.expand({2, 3, 8}), others[0], others[1]};
    const auto out = fused ? fused_route_sources(sources, query, gain, 1e-6, 2)
                           : route_sources(torch::stack(sources), query, gain, 1e-6, 2);
    out.backward(grad_out);
    grads[fused] = null_source.grad();
  }
  EXPECT_LT((grads[1] - grads[0]).abs().max().item<double>(), 1e-12);
}

}  // namespace
}  // namespace inkstone
