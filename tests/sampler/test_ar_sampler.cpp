// The AR sampler and the sampling filters: reproducible draws, greedy against the full forward, eos, log-probs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/language_model.h"
#include "sampler/ar_sampler.h"
#include "sampler/sampling.h"
#include "tests/fixtures.h"
#include "tests/sampler/sampler_fixtures.h"

namespace inkstone {
namespace {

using testing::kSamplerVocab;
using testing::peaked_tiny_model;

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10}};

ArSampleOptions options(double temperature, int64_t seed = 0) {
  ArSampleOptions o;
  o.num_samples = 2;
  o.max_new_tokens = 12;
  o.sampling.temperature = temperature;
  o.seed = seed;
  return o;
}

std::vector<std::vector<int32_t>> tokens_of(const ArSampleResult& result) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : result.samples) out.push_back(s.tokens);
  return out;
}

// The next-token logits of the full forward on prompt + generated[:i], for every i.
std::vector<torch::Tensor> replay(LanguageModel& model, const std::vector<int32_t>& prompt,
                                  const std::vector<int32_t>& generated) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> sequence(prompt.begin(), prompt.end());
  std::vector<torch::Tensor> logits;
  for (int32_t token : generated) {
    const auto input = torch::tensor(sequence, torch::kLong).unsqueeze(0);
    logits.push_back(model(input)[0][-1]);
    sequence.push_back(token);
  }
  return logits;
}

TEST(Sampling, TopPKeepsSmallestSetReachingMass) {
  // Probabilities 0.4, 0.3, 0.15, 0.1, 0.05 in two different orders; mass before each: 0, .4, .7, .85, .95.
  const auto probs = torch::tensor({{0.15, 0.4, 0.05, 0.3, 0.1}, {0.05, 0.1, 0.15, 0.3, 0.4}});
  const auto logits = probs.log().to(torch::kFloat);
  const std::vector<std::pair<double, int64_t>> expected_kept = {{0.3, 1}, {0.5, 2}, {0.8, 3}, {0.9, 4}, {0.97, 5}};
  for (const auto& [p, kept] : expected_kept) {
    const auto filtered = top_p_filter(logits, p);
    const auto keep = filtered.isfinite();
    EXPECT_EQ(keep.sum(1).eq(kept).all().item<bool>(), true) << "p = " << p;
    // The kept ones are the most likely and keep their logits.
    const auto kept_min = probs.masked_fill(keep.logical_not(), 2.0).amin(1);
    const auto dropped_max = probs.masked_fill(keep, -1.0).amax(1);
    EXPECT_TRUE(kept_min.gt(dropped_max).all().item<bool>()) << "p = " << p;
    EXPECT_TRUE(torch::equal(filtered.masked_select(keep), logits.masked_select(keep)));
  }
  EXPECT_TRUE(torch::equal(top_p_filter(logits, 1.0), logits));
}

TEST(Sampling, TopKKeepsKLargest) {
  const auto logits = torch::tensor({{0.5f, -1.0f, 2.0f, 0.1f}});
  const auto filtered = top_k_filter(logits, 2);
  EXPECT_TRUE(torch::equal(filtered.isfinite(), torch::tensor({{true, false, true, false}})));
  EXPECT_TRUE(torch::equal(top_k_filter(logits, 0), logits));
}

TEST(Sampling, LogProbsAreTemperedAndRenormalised) {
  const auto logits = torch::tensor({{1.0f, 2.0f, 3.0f, 0.0f}});
  SamplingParams params;
  params.temperature = 0.5;
  params.top_k = 2;
  const auto lp = sampling_log_probs(logits, params);
  // Kept: logits 3 and 2 at temperature 0.5 -> log-softmax of (6, 4).
  EXPECT_NEAR(lp[0][2].item<double>(), -std::log1p(std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(lp[0][1].item<double>(), -2.0 - std::log1p(std::exp(-2.0)), 1e-6);
  EXPECT_TRUE(std::isinf(lp[0][0].item<double>()));
}

TEST(ArSampler, SameSeedSameSamplesDifferentSeedDifferent) {
  auto model = peaked_tiny_model();
  const auto a = sample_autoregressive(model, kPrompts, options(1.0, 7));
  const auto b = sample_autoregressive(model, kPrompts, options(1.0, 7));
  const auto c = sample_autoregressive(model, kPrompts, options(1.0, 8));
  ASSERT_EQ(a.samples.size(), 6u);
  EXPECT_EQ(tokens_of(a), tokens_of(b));
  for (size_t i = 0; i < a.samples.size(); ++i) EXPECT_EQ(a.samples[i].log_probs, b.samples[i].log_probs);
  EXPECT_NE(tokens_of(a), tokens_of(c));
  // Two samples of one prompt are independent draws.
  EXPECT_NE(a.samples[0].tokens, a.samples[1].tokens);
  EXPECT_EQ(a.samples[3].prompt_index, 1);
  EXPECT_GT(a.tokens_per_s, 0);
}

TEST(ArSampler, GreedyIsArgmaxOfFullForwardWithAndWithoutCache) {
  auto model = peaked_tiny_model();
  for (bool use_cache : {true, false}) {
    auto o = options(0.0);
    o.use_kv_cache = use_cache;
    const auto result = sample_autoregressive(model, kPrompts, o);
    for (const auto& sample : result.samples) {
      ASSERT_EQ(sample.tokens.size(), 12u);
      EXPECT_EQ(sample.finish, FinishReason::length);
      const auto logits = replay(model, kPrompts[sample.prompt_index], sample.tokens);
      for (size_t i = 0; i < sample.tokens.size(); ++i) {
        EXPECT_EQ(logits[i].argmax().item<int64_t>(), sample.tokens[i]) << "cache " << use_cache << " step " << i;
        EXPECT_EQ(sample.log_probs[i], 0.0f);
      }
    }
  }
}

TEST(ArSampler, TopK1EqualsGreedy) {
  auto model = peaked_tiny_model();
  auto top1 = options(1.0, 3);
  top1.sampling.top_k = 1;
  EXPECT_EQ(tokens_of(sample_autoregressive(model, kPrompts, top1)),
            tokens_of(sample_autoregressive(model, kPrompts, options(0.0))));
}

// The reported log-probs are those of the filtered, tempered distribution of the full forward (RL reuses them),
// and the cache does not change what is drawn.
TEST(ArSampler, LogProbsMatchFullForwardAndCacheDoesNotChangeDraws) {
  auto model = peaked_tiny_model();
  auto o = options(0.8, 5);
  o.sampling.top_k = 10;
  o.sampling.top_p = 0.9;
  const auto cached = sample_autoregressive(model, kPrompts, o);
  o.use_kv_cache = false;
  EXPECT_EQ(tokens_of(cached), tokens_of(sample_autoregressive(model, kPrompts, o)));
  for (const auto& sample : cached.samples) {
    const auto logits = replay(model, kPrompts[sample.prompt_index], sample.tokens);
    for (size_t i = 0; i < sample.tokens.size(); ++i) {
      const auto lp = sampling_log_probs(logits[i].unsqueeze(0), o.sampling)[0][sample.tokens[i]];
      EXPECT_NEAR(lp.item<double>(), sample.log_probs[i], 1e-5);
    }
  }
}

// Two end ids, as a chat model has (end of turn and end of text): a row ends at the first of either.
TEST(ArSampler, EndIdsStopEachRowAtItsFirstEndId) {
  auto model = peaked_tiny_model();
  const auto free_run = sample_autoregressive(model, kPrompts, options(1.0, 9));
  auto o = options(1.0, 9);
  o.end_ids = {free_run.samples[0].tokens[2], free_run.samples[1].tokens[4]};
  const auto stopped = sample_autoregressive(model, kPrompts, o);
  int64_t total = 0;
  for (size_t r = 0; r < stopped.samples.size(); ++r) {
    const auto& full = free_run.samples[r].tokens;
    const auto eos_at = std::find_first_of(full.begin(), full.end(), o.end_ids.begin(), o.end_ids.end());
    const std::vector<int32_t> expected(full.begin(), eos_at == full.end() ? full.end() : eos_at + 1);
    EXPECT_EQ(stopped.samples[r].tokens, expected) << "row " << r;
    EXPECT_EQ(stopped.samples[r].finish, eos_at == full.end() ? FinishReason::length : FinishReason::eos);
    EXPECT_EQ(stopped.samples[r].log_probs.size(), expected.size());
    total += static_cast<int64_t>(expected.size());
  }
  EXPECT_EQ(stopped.samples[0].tokens.size(), 3u);
  EXPECT_EQ(stopped.generated_tokens, total);
}

TEST(ArSampler, RejectsBadInput) {
  auto model = peaked_tiny_model();
  EXPECT_THROW(sample_autoregressive(model, {{1}, {}}, options(1.0)), InputError);
  EXPECT_THROW(sample_autoregressive(model, {{1, kSamplerVocab}}, options(1.0)), InputError);
  auto o = options(1.0);
  o.sampling.top_p = 0;
  EXPECT_THROW(sample_autoregressive(model, {{1}}, o), InputError);
}

}  // namespace
}  // namespace inkstone

namespace inkstone {
namespace {

// A vocabulary padded past the tokenizer (model.vocab_size > tokenizer ids, as HF checkpoints have): the padding
// rows are made the likeliest, and still no draw lands on one.
TEST(ArSampler, NeverDrawsPaddingRowsOfTheVocabulary) {
  ModelConfig config = testing::peaked_model_config();
  config.vocab_size = kSamplerVocab + 35;
  torch::manual_seed(11);
  auto model = build_language_model(config, kSamplerVocab);
  ASSERT_EQ(model->token_count(), kSamplerVocab);
  {
    torch::NoGradGuard no_grad;
    model->embed->weight.narrow(0, kSamplerVocab, 35).mul_(50.0);  // the tied head scores padding rows highest
  }
  {
    torch::NoGradGuard no_grad;
    const auto full = model->forward(torch::tensor({1, 2, 3}, torch::kLong).unsqueeze(0));
    ASSERT_GE(full[0][-1].argmax().item<int64_t>(), kSamplerVocab) << "the padding rows must be the likeliest";
  }
  const auto result = sample_autoregressive(model, kPrompts, options(1.0, 3));
  for (const auto& sample : result.samples)
    for (int32_t id : sample.tokens) EXPECT_LT(id, kSamplerVocab);
}

}  // namespace
}  // namespace inkstone
