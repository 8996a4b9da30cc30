// The vocabulary loss in row chunks against the composite it replaces (the whole [N, V] logits at once): losses,
// terms and gradients in float64 (an oracle of the same formulas) and float32, and its memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/tensor_memory.h"
#include "objectives/chunked_vocab.h"
#include "objectives/z_loss.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

using testing::max_abs_diff;

// AR-like terms of targets: the negative log-likelihood and log²Z (differentiable), and argmax hits (a metric).
ChunkTermsFn next_token_terms(const torch::Tensor& targets) {
  return [targets](const torch::Tensor& logits, int64_t begin) {
    const auto target = targets.narrow(0, begin, logits.size(0));
    const auto log_probs = torch::log_softmax(logits, -1);
    return torch::stack({-log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1), log_z_squared(logits),
                         logits.argmax(-1).eq(target).to(logits.scalar_type())},
                        1);
  };
}

struct Problem {
  torch::Tensor hidden, weight, targets;
};

Problem random_problem(torch::Dtype dtype, int64_t rows = 37, int64_t d = 8, int64_t vocab = 29) {
  torch::manual_seed(11);
  return {torch::randn({rows, d}, torch::kDouble).to(dtype).requires_grad_(true),
          torch::randn({vocab, d}, torch::kDouble).mul(0.7).to(dtype).requires_grad_(true),
          torch::randint(0, vocab, {rows}, torch::kLong)};
}

// Relative to the largest magnitude of the reference.
double relative_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return max_abs_diff(got, want) / std::max(1e-30, want.to(torch::kDouble).abs().max().item<double>());
}

struct Gradients {
  torch::Tensor loss, terms, hidden, weight;
};

// The composite: every logit at once, autograd through the same terms.
Gradients composite_loss(const Problem& p, const std::vector<double>& coefficients, double upstream) {
  const auto logits = torch::mm(p.hidden, p.weight.t());
  const auto terms = next_token_terms(p.targets)(p.hidden.scalar_type() == torch::kDouble ? logits : logits.to(torch::kFloat), 0);
  const auto c = torch::tensor(coefficients, torch::kDouble).to(terms.scalar_type()).unsqueeze(0);
  const auto loss = (terms * c).sum();
  const auto grads = torch::autograd::grad({loss * upstream}, {p.hidden, p.weight});
  return {loss.detach(), terms.detach(), grads[0], grads[1]};
}

Gradients chunked_loss(const Problem& p, const std::vector<double>& coefficients, double upstream, int64_t chunk) {
  const auto out = chunked_vocab_loss(p.hidden, p.weight, next_token_terms(p.targets), coefficients, chunk);
  const auto grads = torch::autograd::grad({out.loss * upstream}, {p.hidden, p.weight});
  return {out.loss.detach(), out.terms, grads[0], grads[1]};
}

void expect_close(const Gradients& got, const Gradients& want, double tolerance) {
  EXPECT_LE(relative_diff(got.loss, want.loss), tolerance);
  EXPECT_LE(relative_diff(got.terms, want.terms), tolerance);
  EXPECT_LE(relative_diff(got.hidden, want.hidden), tolerance);
  EXPECT_LE(relative_diff(got.weight, want.weight), tolerance);
}

TEST(ChunkedVocab, LossAndGradientsEqualTheCompositeInFloat64) {
  const auto p = random_problem(torch::kDouble);
  const std::vector<double> coefficients = {1.0, 0.3, 0.0};
  const auto want = composite_loss(p, coefficients, 0.7);
  for (int64_t chunk : {1, 5, 36, 37, 100}) {  // uneven, one row short of all, all, more than all
    SCOPED_TRACE(chunk);
    expect_close(chunked_loss(p, coefficients, 0.7, chunk), want, 1e-12);
  }
}

TEST(ChunkedVocab, LossAndGradientsEqualTheCompositeInFloat32) {
  const auto p = random_problem(torch::kFloat, 300, 24, 500);
  const std::vector<double> coefficients = {1.0, 1e-2, 0.0};
  expect_close(chunked_loss(p, coefficients, 0.25, 7), composite_loss(p, coefficients, 0.25), 1e-6);
}

TEST(ChunkedVocab, MetricColumnsCarryNoGradient) {
  const auto p = random_problem(torch::kDouble);
  // Only the log-likelihood weighs: the log²Z column's coefficient 0 must leave the gradient unchanged.
  const auto with_metric = chunked_loss(p, {1.0, 0.0, 0.0}, 1.0, 4);
  const auto logits = torch::mm(p.hidden, p.weight.t());
  const auto nll = -torch::log_softmax(logits, -1).gather(-1, p.targets.unsqueeze(-1)).sum();
  const auto grads = torch::autograd::grad({nll}, {p.hidden, p.weight});
  EXPECT_LE(relative_diff(with_metric.hidden, grads[0]), 1e-12);
  EXPECT_LE(relative_diff(with_metric.weight, grads[1]), 1e-12);
}

TEST(ChunkedVocab, TermsGradientsEqualTheCompositeForAnyUpstream) {
  const auto p = random_problem(torch::kDouble);
  const auto upstream = torch::randn({37, 3}, torch::kDouble);
  const auto terms = chunked_vocab_terms(p.hidden, p.weight, next_token_terms(p.targets), 6);
  const auto got = torch::autograd::grad({(terms * upstream).sum()}, {p.hidden, p.weight});
  const auto whole = next_token_terms(p.targets)(torch::mm(p.hidden, p.weight.t()), 0);
  const auto want = torch::autograd::grad({(whole * upstream).sum()}, {p.hidden, p.weight});
  EXPECT_LE(relative_diff(terms.detach(), whole.detach()), 1e-12);
  EXPECT_LE(relative_diff(got[0], want[0]), 1e-12);
  EXPECT_LE(relative_diff(got[1], want[1]), 1e-12);
}

TEST(ChunkedVocab, FrozenHeadGetsNoGradientAndTheHiddenStillDoes) {
  auto p = random_problem(torch::kDouble);
  p.weight = p.weight.detach();
  const auto out = chunked_vocab_loss(p.hidden, p.weight, next_token_terms(p.targets), {1.0, 0.0, 0.0}, 5);
  out.loss.backward();
  EXPECT_FALSE(p.weight.grad().defined());
  const auto logits = torch::mm(p.hidden, p.weight.t());
  const auto nll = -torch::log_softmax(logits, -1).gather(-1, p.targets.unsqueeze(-1)).sum();
  const auto want = torch::autograd::grad({nll}, {p.hidden})[0];
  EXPECT_LE(relative_diff(p.hidden.grad(), want), 1e-12);
}

TEST(ChunkedVocab, WithoutGradientTheLossIsTheSameAndKeepsNoGraph) {
  const auto p = random_problem(torch::kDouble);
  const auto with_grad = chunked_vocab_loss(p.hidden, p.weight, next_token_terms(p.targets), {1.0, 0.5, 0.0}, 5);
  torch::NoGradGuard no_grad;
  const auto without = chunked_vocab_loss(p.hidden, p.weight, next_token_terms(p.targets), {1.0, 0.5, 0.0}, 5);
  EXPECT_FALSE(without.loss.requires_grad());
  EXPECT_EQ(without.loss.item<double>(), with_grad.loss.item<double>());
  EXPECT_TRUE(torch::equal(without.terms, with_grad.terms));
}

TEST(ChunkedVocab, RefusesMismatchedCoefficientsAndShapes) {
  const auto p = random_problem(torch::kDouble);
  EXPECT_THROW(chunked_vocab_loss(p.hidden, p.weight, next_token_terms(p.targets), {1.0, 0.5}, 5), c10::Error);
  EXPECT_THROW(chunked_vocab_terms(p.hidden.t(), p.weight, next_token_terms(p.targets), 5), c10::Error);
  EXPECT_THROW(chunked_vocab_terms(p.hidden, p.weight, next_token_terms(p.targets), 0), c10::Error);
}

TEST(ChunkedVocab, ChunkRowsFollowTheBudget) {
  EXPECT_EQ(chunk_rows_for(151671, 256, false), 442);  // 256 MiB / (4 bytes · 151,671)
  EXPECT_EQ(chunk_rows_for(50304, 256, false), 1334);
  EXPECT_EQ(chunk_rows_for(50304, 0, true), 1334);  // the device's own: 256 MiB on CUDA
  EXPECT_EQ(chunk_rows_for(50304, 0, false), 83);   // 16 MiB elsewhere
  EXPECT_EQ(chunk_rows_for(1 << 30, 1, false), 1);  // never less than one row
}

// The point of the chunks: the peak of a forward and backward grows with one chunk's logits, not with all rows'.
TEST(ChunkedVocab, PeakMemoryHoldsOneChunkNotTheWholeLogits) {
  count_cpu_tensor_memory();
  const int64_t rows = 2048, d = 16, vocab = 4096, chunk = 32;
  torch::manual_seed(3);
  const auto hidden = torch::randn({rows, d}).requires_grad_(true);
  const auto weight = torch::randn({vocab, d}).mul(0.2).requires_grad_(true);
  const auto targets = torch::randint(0, vocab, {rows}, torch::kLong);
  const double before = cpu_tensor_live_mib();
  reset_cpu_tensor_peak();
  const auto out = chunked_vocab_loss(hidden, weight, next_token_terms(targets), {1.0, 1e-4, 0.0}, chunk);
  out.loss.backward();
  const double peak = cpu_tensor_peak_mib() - before;
  const double mib = 1024.0 * 1024.0;
  const double whole_logits = rows * vocab * 4.0 / mib;  // 32 MiB: what the composite holds several times over
  // Gradients of hidden and weight (twice: the accumulators and the returned copies) and a few chunk copies.
  const double allowed = (2.0 * (rows + vocab) * d * 4.0 + 6.0 * chunk * vocab * 4.0) / mib;
  RecordProperty("peak_mib", std::to_string(peak));
  EXPECT_LE(peak, allowed) << "whole logits: " << whole_logits << " MiB";
  EXPECT_LT(peak, whole_logits / 4);
}

}  // namespace
}  // namespace inkstone
