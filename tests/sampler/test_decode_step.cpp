// Per-row decoding at a fixed window (the form a CUDA graph replays) against the growing KV cache: the same logits
// step by step for padded prompts of different lengths, the same samples, and the models whose step cannot be
// captured named.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/errors.h"
#include "models/language_model.h"
#include "sampler/ar_sampler.h"
#include "sampler/decode_step.h"
#include "tests/fixtures.h"
#include "tests/sampler/sampler_fixtures.h"

namespace inkstone {
namespace {

using testing::kSamplerVocab;
using testing::peaked_tiny_model;

// Two rows, the first left-padded by three slots, prefilled into a cache of `capacity` slots.
struct Prefilled {
  KVCache cache;
  torch::Tensor lengths;  // [2]
  torch::Tensor logits;   // [2, V] of the last prompt token
};

Prefilled prefill(LanguageModel& model, int64_t capacity) {
  const auto tokens = torch::tensor({{0, 0, 0, 5, 6}, {1, 2, 3, 4, 7}}, torch::kLong);
  const auto real = torch::tensor({{false, false, false, true, true}, {true, true, true, true, true}});
  const auto positions = torch::tensor({{0, 0, 0, 0, 1}, {0, 1, 2, 3, 4}}, torch::kLong);
  Prefilled out{model->make_kv_cache(2, capacity), torch::tensor({2, 5}, torch::kLong), {}};
  const auto hidden = model->extend_cache(tokens, out.cache, {MaskMode::causal, positions, real});
  out.logits = model->logits(hidden.select(1, -1), HeadRows::tokens);
  return out;
}

TEST(FixedWindowDecoding, GivesTheGrowingCachesLogitsEveryStep) {
  torch::NoGradGuard no_grad;
  auto model = peaked_tiny_model();
  auto growing = prefill(model, 12);
  auto fixed = prefill(model, 12);
  FixedWindowDecoder decoder(model, fixed.cache, 2, /*use_graph=*/false);
  EXPECT_FALSE(decoder.graphed());
  auto expected = growing.logits;
  for (int64_t step = 0; step < 7; ++step) {  // fills the cache to its last slot
    const auto tokens = expected.argmax(-1);
    const auto positions = growing.lengths + step;
    const auto hidden = model->extend_cache(tokens.unsqueeze(1), growing.cache, {MaskMode::causal, positions.unsqueeze(1), {}});
    expected = model->logits(hidden.select(1, -1), HeadRows::tokens);
    const auto got = decoder.step(tokens, positions, torch::full({2}, 5 + step, torch::kLong));
    EXPECT_TRUE(torch::allclose(got, expected, 1e-5, 1e-5)) << "step " << step << ": max difference "
                                                            << (got - expected).abs().max().item<double>();
  }
  EXPECT_THROW(decoder.step(expected.argmax(-1), growing.lengths + 7, torch::full({2}, 12, torch::kLong)),
               c10::Error);  // no slot left
}

TEST(FixedWindowDecoding, SamplesWhatTheGrowingCacheSamples) {
  auto model = peaked_tiny_model();
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10}};
  for (const double temperature : {0.0, 1.0}) {
    ArSampleOptions o;
    o.num_samples = 2;
    o.max_new_tokens = 12;
    o.sampling.temperature = temperature;
    o.seed = 5;
    o.decode = DecodeMode::growing_cache;
    const auto growing = sample_autoregressive(model, prompts, o);
    o.decode = DecodeMode::fixed_window;
    const auto fixed = sample_autoregressive(model, prompts, o);
    EXPECT_FALSE(fixed.cuda_graph);
    ASSERT_EQ(fixed.samples.size(), growing.samples.size());
    for (size_t i = 0; i < fixed.samples.size(); ++i) {
      EXPECT_EQ(fixed.samples[i].tokens, growing.samples[i].tokens) << "temperature " << temperature << " row " << i;
      for (size_t t = 0; t < fixed.samples[i].log_probs.size(); ++t)
        EXPECT_NEAR(fixed.samples[i].log_probs[t], growing.samples[i].log_probs[t], 1e-5);
    }
  }
}

TEST(FixedWindowDecoding, NamesWhatKeepsAModelFromBeingCaptured) {
  auto config = testing::tiny_model_config(0.02);
  EXPECT_EQ(graph_decode_obstacle(config), "");
  auto conv = config;
  conv.mixer_pattern = "AC";
  EXPECT_EQ(graph_decode_obstacle(conv), "model.mixer_pattern has short convolutions");
  auto moe = config;
  moe.ffn_pattern = "M";
  EXPECT_EQ(graph_decode_obstacle(moe), "model.ffn_pattern has MoE layers");
  auto routed = config;
  routed.residual = ResidualMode::mhar;
  EXPECT_EQ(graph_decode_obstacle(routed), "model.residual is mhar");
}

TEST(FixedWindowDecoding, AGraphIsRefusedWithoutCuda) {
  auto model = peaked_tiny_model();
  ArSampleOptions o;
  o.max_new_tokens = 4;
  o.decode = DecodeMode::cuda_graph;
  try {
    sample_autoregressive(model, {{1, 2}}, o);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "CUDA graph decoding needs a CUDA device");
  }
}

}  // namespace
}  // namespace inkstone
