// The keyed token draw of AR decoding (sampler/kernels/token_draw.h): its draws follow the filtered softmax
// (chi-square against float64 probabilities), its log-probs are the composite filters' (sampler/sampling.h), greedy
// is the argmax, and a row's token depends on its key alone, not on the batch around it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "sampler/kernels/token_draw.h"
#include "sampler/sampling.h"

namespace inkstone {
namespace {

kernels::FilterParams filter_of(const SamplingParams& s, int64_t vocab) {
  return {s.temperature, s.top_k, s.top_p, s.min_p, vocab};
}

// Keys 0..n−1 at position 3.
KeyedDraws draw_rows(const torch::Tensor& logits, const SamplingParams& s, uint64_t seed) {
  const int64_t n = logits.size(0);
  return keyed_token_draw(logits, torch::arange(n, torch::kLong), torch::full({n}, 3, torch::kLong),
                          filter_of(s, logits.size(1)), seed);
}

TEST(KeyedTokenDraw, FollowsTheFilteredSoftmax) {
  torch::manual_seed(0);
  const int64_t vocab = 12, draws = 40000;
  const auto row = torch::randn({1, vocab}) * 1.5;
  for (const SamplingParams s : {SamplingParams{1.0, 0, 1.0, 0.0}, SamplingParams{0.7, 6, 1.0, 0.0},
                                 SamplingParams{1.3, 0, 0.8, 0.0}, SamplingParams{1.0, 0, 1.0, 0.1}}) {
    const auto probs = sampling_log_probs(row.to(torch::kDouble), s).exp()[0];
    const auto drawn = draw_rows(row.expand({draws, vocab}).contiguous(), s, 11);
    const auto counts = torch::bincount(drawn.tokens, {}, vocab).to(torch::kDouble);
    double chi_square = 0;
    int64_t kept = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double p = probs[v].item<double>();
      if (p == 0) {
        EXPECT_EQ(counts[v].item<double>(), 0) << "a filtered-out id was drawn: " << v;
        continue;
      }
      ++kept;
      const double expected = p * draws;
      chi_square += std::pow(counts[v].item<double>() - expected, 2) / expected;
    }
    // 99.9% quantile of chi-square with k − 1 <= 11 degrees of freedom is 31.3.
    EXPECT_LT(chi_square, 31.3) << "temperature " << s.temperature << " top_k " << s.top_k << " top_p " << s.top_p
                                << " min_p " << s.min_p << " kept " << kept;
  }
}

TEST(KeyedTokenDraw, LogProbsAreTheCompositeFiltersAtTheDrawnToken) {
  torch::manual_seed(1);
  const auto logits = torch::randn({64, 300}) * 3;
  for (const SamplingParams s : {SamplingParams{1.0, 0, 1.0, 0.0}, SamplingParams{0.5, 20, 0.9, 0.0},
                                 SamplingParams{2.0, 0, 0.6, 0.05}}) {
    const auto drawn = draw_rows(logits, s, 3);
    const auto expected = sampling_log_probs(logits.to(torch::kDouble), s)
                              .gather(1, drawn.tokens.unsqueeze(1))
                              .squeeze(1)
                              .to(torch::kFloat);
    EXPECT_TRUE(torch::allclose(drawn.log_probs, expected, 1e-5, 1e-5))
        << (drawn.log_probs - expected).abs().max().item<double>();
  }
}

TEST(KeyedTokenDraw, GreedyIsTheArgmaxWithLogProbZero) {
  torch::manual_seed(2);
  const auto logits = torch::randn({16, 50});
  const auto drawn = draw_rows(logits, SamplingParams{0.0, 0, 1.0, 0.0}, 0);
  EXPECT_TRUE(torch::equal(drawn.tokens, logits.argmax(1)));
  EXPECT_TRUE(torch::equal(drawn.log_probs, torch::zeros({16})));
}

// A row without one finite logit (a broken model's NaN, or all −inf) has no winner: token 0 with a NaN log-prob,
// never the id one past the vocabulary (whose embedding lookup would fail on the next step).
TEST(KeyedTokenDraw, ARowWithoutAFiniteLogitDrawsTokenZeroWithAnUndefinedLogProb) {
  auto logits = torch::randn({3, 20});
  logits[1].fill_(std::nan(""));
  logits[2].fill_(-std::numeric_limits<float>::infinity());
  for (const SamplingParams s : {SamplingParams{1.0, 0, 1.0, 0.0}, SamplingParams{0.0, 0, 1.0, 0.0},
                                 SamplingParams{0.8, 5, 0.9, 0.05}}) {
    const auto drawn = draw_rows(logits, s, 7);
    for (const int64_t row : {1, 2}) {
      EXPECT_EQ(drawn.tokens[row].item<int64_t>(), 0) << "row " << row;
      EXPECT_TRUE(std::isnan(drawn.log_probs[row].item<float>())) << "row " << row;
    }
    EXPECT_LT(drawn.tokens[0].item<int64_t>(), 20);
    EXPECT_TRUE(std::isfinite(drawn.log_probs[0].item<float>()));
  }
}

TEST(KeyedTokenDraw, ARowsTokenDependsOnItsKeyNotOnItsBatch) {
  torch::manual_seed(3);
  const auto logits = torch::randn({8, 100});
  const SamplingParams s;
  const auto sequences = torch::tensor({5, 9, 2, 7, 1, 0, 4, 3}, torch::kLong);
  const auto positions = torch::tensor({0, 1, 2, 3, 4, 5, 6, 7}, torch::kLong);
  const auto all = keyed_token_draw(logits, sequences, positions, filter_of(s, 100), 42);
  const auto order = torch::tensor({6, 2, 7, 0}, torch::kLong);
  const auto some = keyed_token_draw(logits.index_select(0, order), sequences.index_select(0, order),
                                     positions.index_select(0, order), filter_of(s, 100), 42);
  EXPECT_TRUE(torch::equal(some.tokens, all.tokens.index_select(0, order)));
  // bf16 logits are read as the floats they hold.
  const auto rounded = logits.to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(keyed_token_draw(rounded, sequences, positions, filter_of(s, 100), 42).tokens,
                           keyed_token_draw(rounded.to(torch::kFloat), sequences, positions, filter_of(s, 100), 42)
                               .tokens));
  const auto other_position = keyed_token_draw(logits, sequences, positions + 1, filter_of(s, 100), 42);
  EXPECT_FALSE(torch::equal(other_position.tokens, all.tokens));
}

}  // namespace
}  // namespace inkstone
