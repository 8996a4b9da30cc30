// Continuous batching (sampler/ar_sampler.h): a sample is the same whatever rows are decoded at once, whichever
// rows finish first and take the next prompt, whether finished rows are compacted into smaller buckets, whichever
// cache form decodes it (per-row slots reading the longest row or every slot, a cache shared by all rows, or no
// cache), and for every mixer the engine serves; ends found on the device are the ends a host scan finds.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "dataset/byte_tokenizer.h"
#include "models/block_registry.h"
#include "models/language_model.h"
#include "sampler/ar_sampler.h"
#include "sampler/row_decoders.h"
#include "sampler/rollout.h"
#include "tests/fixtures.h"
#include "tests/sampler/sampler_fixtures.h"

namespace inkstone {
namespace {

using testing::kSamplerVocab;

// Five prompts of different lengths.
const std::vector<std::vector<int32_t>> kVariedPrompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}, {12, 13}, {14, 15, 16, 17}};

ArSampleOptions varied_options() {
  ArSampleOptions o;
  o.num_samples = 3;
  o.max_new_tokens = 14;
  o.seed = 21;
  o.decode = DecodeMode::growing_cache;
  return o;
}

// End ids that the free run draws early in some rows and never in others, so that rows end at varied lengths.
std::vector<int32_t> varied_end_ids(LanguageModel& model) {
  const auto free_run = sample_autoregressive(model, kVariedPrompts, varied_options());
  return {free_run.samples[0].tokens[3], free_run.samples[4].tokens[6]};
}

void expect_same_samples(const ArSampleResult& got, const ArSampleResult& expected, const std::string& what) {
  ASSERT_EQ(got.samples.size(), expected.samples.size()) << what;
  for (size_t i = 0; i < got.samples.size(); ++i) {
    EXPECT_EQ(got.samples[i].prompt_index, expected.samples[i].prompt_index) << what << " sample " << i;
    EXPECT_EQ(got.samples[i].tokens, expected.samples[i].tokens) << what << " sample " << i;
    EXPECT_EQ(got.samples[i].finish, expected.samples[i].finish) << what << " sample " << i;
    ASSERT_EQ(got.samples[i].log_probs.size(), expected.samples[i].log_probs.size()) << what;
    for (size_t t = 0; t < got.samples[i].log_probs.size(); ++t)
      EXPECT_NEAR(got.samples[i].log_probs[t], expected.samples[i].log_probs[t], 1e-4) << what << " sample " << i;
  }
}

// After a compaction the bucket's idle rows hold a kept row's state. Before, an idle row kept its old occupant's
// cache (a 1-token prompt prefilled beside a 40-token one: slots 0..38 padding) under the kept rows' read limit
// (3 slots), so it attended to padding only and its logits were NaN.
TEST(ContinuousBatching, IdleRowsOfACompactedBucketAttendToRealKeys) {
  auto model = testing::peaked_tiny_model();
  RowDecoderSpec spec;
  spec.rows = 8;
  spec.capacity = 64;
  spec.decode = DecodeMode::growing_cache;
  const auto decoder = make_row_decoder(model, spec);
  const std::vector<int32_t> long_prompt(40, 5), one_token = {3};
  std::vector<const std::vector<int32_t>*> prompts(8, &one_token);
  prompts[0] = &long_prompt;
  decoder->start({0, 1, 2, 3, 4, 5, 6, 7}, prompts);
  decoder->step(torch::full({8}, 4, torch::kLong));
  decoder->start({1, 2, 4}, {&one_token, &one_token, &one_token});  // short refills: slot 1
  decoder->step(torch::full({8}, 4, torch::kLong));
  decoder->compact({1, 2, 4}, 4);  // idle row 3 held a padded 1-token prompt
  const auto logits = decoder->step(torch::full({4}, 4, torch::kLong));
  ASSERT_EQ(logits.size(0), 4);
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>()) << logits.isnan().any(1);
}

// Next-token logits [V] fp32 of `sequence` run alone through the (float64) model.
torch::Tensor logits_alone(LanguageModel& model, const std::vector<int32_t>& sequence) {
  const auto tokens = torch::tensor(std::vector<int64_t>(sequence.begin(), sequence.end()), torch::kLong);
  return model(tokens.unsqueeze(0))[0][-1].slice(0, 0, kSamplerVocab);
}

// The prompts a start hands a decoder are prefilled packed into one row (each prompt attends to its own tokens,
// with no slot of padding before them); a model whose convolutions carry state left-pads them. Either way every
// row's first logits, and its logits after each step and after a refill beside running rows, are those of its own
// sequence run alone: float64 weights with an attention sink and grouped queries, a prompt shared by two rows, and
// both read forms (the longest row's slots, every slot).
TEST(ContinuousBatching, EveryRowDecodesItsSequenceAsAloneAfterAPackedPrefill) {
  struct Backbone {
    const char* name;
    void (*edit)(ModelConfig&);
    bool packed;  // the decoder packs where tokens meet only by attention
  };
  const Backbone backbones[] = {
      {"attention, packed", [](ModelConfig& c) { c.attention_sink = true; }, true},
      {"short convolutions, left-padded", [](ModelConfig& c) { c.mixer_pattern = "AC"; }, false},
  };
  torch::NoGradGuard no_grad;  // as the sampler runs it (a packed prefill then attends by document buckets)
  for (const auto& backbone : backbones) {
    ModelConfig config = testing::peaked_model_config();
    backbone.edit(config);
    ASSERT_EQ(mixes_tokens_only_by_attention(config), backbone.packed) << backbone.name;
    torch::manual_seed(12);
    auto model = build_language_model(config, kSamplerVocab);
    model->to(torch::kDouble);
    for (const auto mode : {DecodeMode::growing_cache, DecodeMode::fixed_window}) {
      const std::string what = std::string(backbone.name) + (mode == DecodeMode::fixed_window ? ", fixed" : "");
      RowDecoderSpec spec;
      spec.rows = 6;
      spec.capacity = 24;
      spec.decode = mode;
      const auto decoder = make_row_decoder(model, spec);
      // Rows 0..5 on prompts 1, 0, 1, 2, 4, 3 (rows 0 and 2 share prompt 1), then rows 1 and 3 refilled.
      std::vector<std::vector<int32_t>> sequences = {kVariedPrompts[1], kVariedPrompts[0], kVariedPrompts[1],
                                                     kVariedPrompts[2], kVariedPrompts[4], kVariedPrompts[3]};
      // One object per distinct prompt, as the engine hands them out (rows naming one prompt share its prefill).
      std::vector<const std::vector<int32_t>*> prompts;
      for (const size_t p : std::initializer_list<size_t>{1, 0, 1, 2, 4, 3}) prompts.push_back(&kVariedPrompts[p]);
      const auto logits = decoder->start({0, 1, 2, 3, 4, 5}, prompts);
      const auto expect_alone = [&](const torch::Tensor& got, const std::string& when) {
        ASSERT_EQ(got.size(0), 6) << what;
        for (size_t r = 0; r < sequences.size(); ++r)
          EXPECT_LT(testing::max_abs_diff(got[static_cast<int64_t>(r)], logits_alone(model, sequences[r])), 1e-5)
              << what << ", " << when << ", row " << r;
      };
      expect_alone(logits, "prefill");
      for (int64_t step = 0; step < 4; ++step) {
        auto fed = torch::empty({6}, torch::kLong);
        for (int64_t r = 0; r < 6; ++r) {
          const auto token = static_cast<int32_t>((5 * r + 3 * step + 1) % kSamplerVocab);
          fed[r] = token;
          sequences[static_cast<size_t>(r)].push_back(token);
        }
        expect_alone(decoder->step(fed), "step " + std::to_string(step));
      }
      const std::vector<int32_t> first = {7, 8, 9, 10, 11, 12}, second = {13};
      sequences[1] = first;
      sequences[3] = second;
      auto refilled = decoder->start({1, 3}, {&first, &second});
      ASSERT_EQ(refilled.size(0), 2) << what;
      EXPECT_LT(testing::max_abs_diff(refilled[0], logits_alone(model, first)), 1e-5) << what << ", refill";
      EXPECT_LT(testing::max_abs_diff(refilled[1], logits_alone(model, second)), 1e-5) << what << ", refill";
      auto fed = torch::full({6}, 2, torch::kLong);
      for (auto& s : sequences) s.push_back(2);
      expect_alone(decoder->step(fed), "after the refill");
    }
  }
}

TEST(ContinuousBatching, SamplesDoNotDependOnRowsBucketsRefillsOrCacheForm) {
  auto model = testing::peaked_tiny_model();
  auto o = varied_options();
  o.end_ids = varied_end_ids(model);
  // A stop rule the host checks: a row ends once it has drawn token 7 twice.
  o.stop_when = [](const std::vector<int32_t>& generated) {
    return std::count(generated.begin(), generated.end(), 7) >= 2;
  };
  o.max_rows = 0;
  o.continuous = false;  // one batch of every sample until the last ends: the reference
  const auto reference = sample_autoregressive(model, kVariedPrompts, o);
  std::set<size_t> lengths;
  std::set<FinishReason> finishes;
  for (const auto& s : reference.samples) {
    lengths.insert(s.tokens.size());
    finishes.insert(s.finish);
  }
  ASSERT_GE(lengths.size(), 4u) << "the rows must end at varied lengths for refills to happen";
  ASSERT_EQ(finishes.size(), 3u) << "eos, stop and length must all occur";

  o.continuous = true;
  for (const int64_t rows : {0, 1, 2, 5, 7}) {
    o.max_rows = rows;
    for (const auto mode : {DecodeMode::growing_cache, DecodeMode::fixed_window}) {
      o.decode = mode;
      expect_same_samples(sample_autoregressive(model, kVariedPrompts, o), reference,
                          "max_rows " + std::to_string(rows) + (mode == DecodeMode::fixed_window ? " fixed" : ""));
    }
  }
  o.use_kv_cache = false;
  o.max_rows = 4;
  expect_same_samples(sample_autoregressive(model, kVariedPrompts, o), reference, "no cache, 4 rows");
}

// Mixers with state of their own (short convolutions), routed residuals, and hidden streams (whose rows share
// one cache and are never refilled) decode the same samples with the cache, refilled, as without it.
TEST(ContinuousBatching, EveryBackboneDecodesTheSameSamplesWithAndWithoutTheCache) {
  struct Backbone {
    const char* name;
    void (*edit)(ModelConfig&);
  };
  const Backbone backbones[] = {
      {"short convolutions", [](ModelConfig& c) { c.mixer_pattern = "AC"; }},
      {"mhar residual", [](ModelConfig& c) { c.residual = ResidualMode::mhar; }},
      {"hidden streams", [](ModelConfig& c) { c.hidden_streams = 2; }},
  };
  for (const auto& backbone : backbones) {
    ModelConfig config = testing::peaked_model_config();
    backbone.edit(config);
    torch::manual_seed(11);
    auto model = build_language_model(config, kSamplerVocab);
    auto o = varied_options();
    o.end_ids = varied_end_ids(model);
    o.use_kv_cache = false;
    o.continuous = false;
    const auto reference = sample_autoregressive(model, kVariedPrompts, o);
    o.use_kv_cache = true;
    o.continuous = true;
    o.max_rows = 3;
    expect_same_samples(sample_autoregressive(model, kVariedPrompts, o), reference, backbone.name);
  }
}

// A bf16 KV cache under fp32 weights: keys and values rounded to 8 bits of mantissa, and attention in bf16, move
// the log-probs by at most 0.15 nats on this peaked model (the bound docs/sampling.md states), and the keyed draws
// stay the same tokens but for a few.
TEST(ContinuousBatching, ABf16CacheGivesLogProbsWithinTheStatedBoundOfFp32) {
  auto model = testing::peaked_tiny_model();
  auto o = varied_options();
  o.max_new_tokens = 20;
  o.max_rows = 4;
  const auto fp32 = sample_autoregressive(model, kVariedPrompts, o);
  o.cache_dtype = torch::kBFloat16;
  const auto bf16 = sample_autoregressive(model, kVariedPrompts, o);
  ASSERT_EQ(bf16.samples.size(), fp32.samples.size());
  int64_t compared = 0, same = 0;
  float worst = 0;
  for (size_t i = 0; i < fp32.samples.size(); ++i) {
    const auto& a = fp32.samples[i];
    const auto& b = bf16.samples[i];
    // Up to the first token the two draw differently (a log-prob is of the token drawn, so compared while equal).
    for (size_t t = 0; t < std::min(a.tokens.size(), b.tokens.size()); ++t) {
      ++compared;
      if (a.tokens[t] != b.tokens[t]) break;
      ++same;
      EXPECT_NEAR(b.log_probs[t], a.log_probs[t], 0.15) << "sample " << i << " token " << t;
      worst = std::max(worst, std::abs(b.log_probs[t] - a.log_probs[t]));
    }
  }
  EXPECT_GT(same, compared * 95 / 100);
  std::cerr << "bf16 cache: " << same << " of " << compared << " draws alike, largest log-prob change " << worst << "\n";
}

// RL rollouts key a completion by its global group: a prompt sampled beside others, or alone under its group id,
// on another rank, gives the same completions.
TEST(ContinuousBatching, ARolloutDependsOnItsGroupNotOnItsBatch) {
  auto model = testing::peaked_tiny_model();
  ByteTokenizer tokenizer;
  RolloutOptions o;
  o.group_size = 3;
  o.max_new_tokens = 10;
  o.seed = 4;
  o.decode = DecodeMode::growing_cache;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2}, {3, 4, 5}, {6}};
  const auto together = generate_rollouts(model, tokenizer, prompts, o, /*first_group=*/10);
  o.max_rows = 2;
  const auto alone = generate_rollouts(model, tokenizer, {prompts[2]}, o, /*first_group=*/12);
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(alone.completions[s], together.completions[6 + s]) << "sample " << s;
}

// A decoder kept across calls (RL's rollouts, one call per step) samples each call as a fresh one does: after
// compactions of earlier calls, in a cache made larger by an earlier call, and it is replaced (and still samples
// right) when a call needs more slots than it holds, when the model's weights have moved (a graph would read the
// old addresses) and when the rows differ; the calls that fit reuse it.
TEST(ContinuousBatching, AKeptDecoderSamplesEveryCallAsAFreshOne) {
  auto model = testing::peaked_tiny_model();
  auto o = varied_options();
  o.end_ids = varied_end_ids(model);
  o.max_rows = 4;
  const std::vector<std::vector<int32_t>> longer = {{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, {15}};  // 6 samples
  for (const auto mode : {DecodeMode::growing_cache, DecodeMode::fixed_window}) {
    SCOPED_TRACE(mode == DecodeMode::fixed_window ? "fixed window" : "growing cache");
    o.decode = mode;
    o.max_new_tokens = varied_options().max_new_tokens;
    KeptRowDecoder kept;
    int64_t call_key = 0;
    auto call = [&](const std::vector<std::vector<int32_t>>& prompts, const std::string& what, int64_t reuses) {
      o.first_prompt = 10 * call_key++;
      expect_same_samples(sample_autoregressive(model, prompts, o, &kept), sample_autoregressive(model, prompts, o),
                          what);
      EXPECT_EQ(kept.reuses(), reuses) << what;
    };
    call(kVariedPrompts, "first call", 0);  // 22 slots: a cache of 64
    call(kVariedPrompts, "second call", 1);
    o.max_new_tokens = kKeptCacheSlotStep - 10;  // 10 + 54 + 1 = 65 slots, 4 rows as before
    call(longer, "more slots than the kept cache", 1);
    call(longer, "the larger cache again", 2);
    o.max_new_tokens = varied_options().max_new_tokens;
    call(kVariedPrompts, "fewer slots, in the larger cache", 3);
    {
      torch::NoGradGuard no_grad;
      auto& weight = model->embed->weight;
      weight.set_data(weight.detach().clone());  // the weights move, as a ZeRO-3 gather may move them
    }
    call(kVariedPrompts, "moved weights", 3);
    call({kVariedPrompts[2]}, "3 rows instead of 4", 3);
  }
}

}  // namespace
}  // namespace inkstone
