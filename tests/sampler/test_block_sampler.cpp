// Semi-autoregressive diffusion sampling: with a block-causal model the KV cache of committed blocks gives the
// samples of recomputing the context under the block-causal rule; a plain model generates in blocks without a
// cache; generation stops once every row has ended its text; budgets past the context are refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>

#include "core/counter_hash.h"
#include "dataset/byte_tokenizer.h"
#include "objectives/masked_noise.h"
#include "objectives/uniform_noise.h"
#include "sampler/block_sampler.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

DiffusionProcess byte_process(int64_t trained_block_size) {
  DiffusionConfig config = default_config().diffusion;
  DiffusionProcess p;
  p.noise = std::make_shared<UniformNoise>(config);
  p.support = std::make_shared<NoiseSupport>(ByteTokenizer(), 260, false);
  p.end_id = ByteTokenizer().specials().eos;
  p.block_size = trained_block_size;
  return p;
}

DiffusionProcess masked_byte_process() {
  DiffusionProcess p;
  p.noise = std::make_shared<MaskedNoise>(default_config().diffusion);
  p.support = std::make_shared<NoiseSupport>(ByteTokenizer(), 260, false);
  p.mask_id = ByteTokenizer().specials().mask;
  p.end_id = ByteTokenizer().specials().eos;
  return p;
}

LanguageModel random_model(uint64_t seed) {
  torch::manual_seed(seed);
  auto model = build_language_model(testing::tiny_model_config(0.3), 260);
  model->eval();
  return model;
}

BlockSampleOptions options_for(DiffusionMethod method, double temperature) {
  BlockSampleOptions o;
  o.block_size = 4;
  o.max_new_tokens = 12;
  o.per_block.steps = 4;
  o.per_block.method = method;
  o.per_block.filter.temperature = temperature;
  o.per_block.seed = 9;
  return o;
}

// Runs `check` with the options of the two ways a block is denoised: greedy confidence commits and ancestral draws
// at temperature 1.
void for_each_block_method(const std::function<void(BlockSampleOptions)>& check) {
  for (const auto& [method, temperature] :
       {std::pair{DiffusionMethod::confidence, 0.0}, std::pair{DiffusionMethod::ancestral, 1.0}}) {
    SCOPED_TRACE(method == DiffusionMethod::confidence ? "greedy confidence" : "ancestral");
    check(options_for(method, temperature));
  }
}

// `options` with the approximate cache over the same context (prefix, or prefix and noisy suffix): refreshed at every
// call it gives the samples and model calls of `exact`, the recomputation of 3 rows after the 5-token prompt;
// refreshed once per block it keeps the prompt and fills every block with byte ids.
void expect_the_approximate_cache_to_match(LanguageModel& model, const DiffusionProcess& process,
                                           const std::vector<int32_t>& prompt, BlockSampleOptions options,
                                           const BlockSampleResult& exact) {
  options.approximate_cache = true;
  options.refresh_every = 1;
  const auto refreshed = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);
  EXPECT_TRUE(refreshed.tokens.equal(exact.tokens));
  EXPECT_EQ(refreshed.model_calls, exact.model_calls);
  options.refresh_every = 0;
  const auto per_block = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);
  ASSERT_EQ(per_block.tokens.sizes(), exact.tokens.sizes());
  EXPECT_TRUE(per_block.tokens.narrow(1, 0, 5).equal(exact.tokens.narrow(1, 0, 5)));
  EXPECT_TRUE(per_block.tokens.narrow(1, 5, per_block.tokens.size(1) - 5).lt(256).all().item<bool>());
}

TEST(BlockSampler, TheCacheOfCommittedBlocksGivesTheSamplesOfRecomputingThem) {
  auto model = random_model(71);
  const auto process = byte_process(4);
  const std::vector<int32_t> prompt{72, 101, 108, 108, 111};
  for_each_block_method([&](BlockSampleOptions options) {
    options.use_cache = true;
    const auto cached = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);
    options.use_cache = false;
    const auto recomputed = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);
    ASSERT_EQ(cached.tokens.sizes(), (std::vector<int64_t>{3, 5 + 12}));
    EXPECT_TRUE(cached.tokens.equal(recomputed.tokens));
    EXPECT_TRUE(cached.tokens.narrow(1, 0, 5).equal(torch::tensor({72, 101, 108, 108, 111}).expand({3, 5})));
    EXPECT_TRUE(cached.fixed.narrow(1, 0, 5).all().item<bool>());
    EXPECT_FALSE(cached.fixed.narrow(1, 5, 12).any().item<bool>());
    EXPECT_EQ(cached.blocks, 3);
    // The block-causal rule matters: the same model read bidirectionally gives other samples.
    const auto plain = sample_in_blocks(model, byte_process(0), prompt, 3, options, torch::kCPU);
    EXPECT_FALSE(plain.tokens.equal(cached.tokens));
  });
}

// The approximate prefix cache (docs/diffusion.md, "Approximate prefix cache") of a model trained on whole
// windows: refreshed at every model call, the block run alone against the context's keys and values gives the
// samples of recomputing the whole sequence; refreshed once per block it still fills every block.
TEST(BlockSampler, TheApproximateCacheRefreshedEveryCallIsTheExactRecomputation) {
  auto model = random_model(71);
  const auto process = byte_process(0);
  const std::vector<int32_t> prompt{72, 101, 108, 108, 111};
  for_each_block_method([&](BlockSampleOptions options) {
    options.use_cache = false;
    expect_the_approximate_cache_to_match(model, process, prompt, options,
                                          sample_in_blocks(model, process, prompt, 3, options, torch::kCPU));
  });
}

// The noisy suffix (docs/diffusion.md, "Noisy suffix and the dual cache"): the blocks still to come are read as
// the prior's noise. The dual cache keeps their keys and values beside the context's; refreshed at every call it
// gives the samples of recomputing the whole canvas (its refreshing pass reorders the tokens, so float64 keeps
// rounding from deciding a draw). Uniform noise reads keyed uniform tokens there, masked noise the mask.
TEST(BlockSampler, TheDualCacheRefreshedEveryCallIsTheExactRecomputationOfTheNoisyCanvas) {
  auto model = random_model(71);
  model->to(torch::kDouble);
  const std::vector<int32_t> prompt{72, 101, 108, 108, 111};
  for (const auto& process : {byte_process(0), masked_byte_process()}) {
    SCOPED_TRACE(process.mask_id < 0 ? "uniform noise" : "masked noise");
    for_each_block_method([&](BlockSampleOptions options) {
      options.use_cache = false;
      const auto growing = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);
      options.noisy_suffix = true;
      const auto exact = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);
      ASSERT_EQ(exact.tokens.sizes(), (std::vector<int64_t>{3, 5 + 12}));
      // The suffix is read: the first block already differs from the text that grows block by block.
      EXPECT_FALSE(exact.tokens.narrow(1, 5, 4).equal(growing.tokens.narrow(1, 5, 4)));
      expect_the_approximate_cache_to_match(model, process, prompt, options, exact);
    });
  }
}

// What the dual cache rests on, at the model: the refreshing pass over [context | suffix | block] with every token
// at its own position gives the block the hidden states of the natural order, and the block run alone against the
// kept slots (the block's wound back) gives them again; with hidden streams too, whose tokens hold several slots.
TEST(BlockSampler, TheDualCachesBlockPassesEqualTheWholeCanvasInItsOwnOrder) {
  const int64_t context = 5, size = 4, after = 8, rows = 2, length = context + size + after;
  for (const int64_t streams : {1, 2}) {
    SCOPED_TRACE("hidden streams " + std::to_string(streams));
    auto config = testing::tiny_model_config(0.3);
    config.hidden_streams = streams;
    torch::manual_seed(5);
    auto model = build_language_model(config, 260);
    model->to(torch::kDouble);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto canvas = torch::randint(256, {rows, length}, torch::kLong);
    WindowInputs window;
    window.mask = MaskMode::bidirectional;
    const auto natural = model->hidden_states(canvas, window).narrow(1, context, size);

    const auto split = [&](int64_t from, int64_t count) { return canvas.narrow(1, from, count); };
    const auto at = [&](int64_t from, int64_t count) {
      return torch::arange(from, from + count, torch::kLong).expand({rows, count});
    };
    KVCache cache = model->make_kv_cache(rows, length);
    const auto reordered = torch::cat({split(0, context), split(context + size, after), split(context, size)}, 1);
    const auto positions = torch::cat({at(0, context), at(context + size, after), at(context, size)}, 1);
    const auto refreshed =
        model->extend_cache(reordered, cache, {MaskMode::bidirectional, positions, {}}).narrow(1, context + after, size);
    cache.rewind((context + after) * streams);
    const auto alone = model->extend_cache(split(context, size), cache, {MaskMode::bidirectional, at(context, size), {}});
    EXPECT_LT((refreshed - natural).abs().max().item<double>(), 1e-12);
    EXPECT_LT((alone - natural).abs().max().item<double>(), 1e-12);
  }
}

// The noisy suffix is the rest of the canvas: with masked noise and greedy confidence, the first block of a run in
// blocks is what the whole-window sampler writes into a canvas of [prompt | 4 open positions | 8 masks fixed].
TEST(BlockSampler, TheFirstBlockOfANoisySuffixRunIsTheWholeWindowSampleOfItsCanvas) {
  auto model = random_model(71);
  const auto process = masked_byte_process();
  const std::vector<int32_t> prompt{72, 101, 108, 108, 111};
  auto options = options_for(DiffusionMethod::confidence, 0.0);
  options.use_cache = false;
  options.noisy_suffix = true;
  const auto blocks = sample_in_blocks(model, process, prompt, 3, options, torch::kCPU);

  auto tokens = torch::full({3, 5 + 12}, process.mask_id, torch::kLong);
  tokens.narrow(1, 0, 5).copy_(torch::tensor({72, 101, 108, 108, 111}).expand({3, 5}));
  auto fixed = torch::ones({3, 5 + 12}, torch::kBool);
  fixed.narrow(1, 5, 4).fill_(false);
  DiffusionSampleOptions whole = options.per_block;
  whole.seed = static_cast<int64_t>(counter_hash({9, 0}) >> 1);  // block 0's seed
  const auto window = sample_diffusion(model_denoiser(model, process), process, {tokens, fixed}, whole, torch::kCPU);
  EXPECT_TRUE(blocks.tokens.narrow(1, 5, 4).equal(window.tokens.narrow(1, 5, 4)));
}

TEST(BlockSampler, ANoisySuffixIsRefusedForABlockCausalModel) {
  auto options = options_for(DiffusionMethod::ancestral, 1.0);
  options.noisy_suffix = true;
  options.use_cache = false;
  auto model = random_model(73);
  EXPECT_NE(testing::input_error_of([&] { sample_in_blocks(model, byte_process(4), {65}, 1, options, torch::kCPU); })
                .find("sample.noisy_suffix (--noisy-suffix) is for models trained on whole windows; this one has "
                      "diffusion.block_size = 4"),
            std::string::npos);
}

TEST(BlockSampler, TheApproximateCacheIsRefusedWhereItCannotWork) {
  auto options = options_for(DiffusionMethod::ancestral, 1.0);
  options.approximate_cache = true;
  auto model = random_model(73);
  options.use_cache = true;  // a block-diffusion model keeps its exact cache
  EXPECT_NE(testing::input_error_of([&] { sample_in_blocks(model, byte_process(4), {65}, 1, options, torch::kCPU); })
                .find("keeps its exact cache"),
            std::string::npos);
  options.use_cache = false;
  auto shifted = byte_process(0);
  shifted.shifted_outputs = true;
  EXPECT_NE(testing::input_error_of([&] { sample_in_blocks(model, shifted, {65}, 1, options, torch::kCPU); })
                .find("shifted_outputs"),
            std::string::npos);
  auto config = testing::tiny_model_config(0.3);
  config.mixer_pattern = "AC";
  torch::manual_seed(3);
  auto conv = build_language_model(config, 260);
  EXPECT_NE(testing::input_error_of([&] { sample_in_blocks(conv, byte_process(0), {65}, 1, options, torch::kCPU); })
                .find("convolution"),
            std::string::npos);
}

// A model whose every logit is 0 but end of text's: blocks add nothing (zero weights), every token embeds to the
// same vector, and the untied head has one row, end of text's, along it.
LanguageModel model_that_ends_every_text(int64_t end_id) {
  auto config = testing::tiny_model_config(0.3);
  config.tie_embeddings = false;
  auto model = build_language_model(config, 260);
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    const bool keep_one = item.key() == "embed.weight" || item.key() == "final_norm.weight";
    item.value().fill_(keep_one ? 1.0 : 0.0);
  }
  model->head->weight[end_id].fill_(10.0);
  return model;
}

TEST(BlockSampler, StopsAfterTheBlockInWhichEveryRowEnded) {
  const auto process = byte_process(4);
  auto model = model_that_ends_every_text(process.end_id);
  const auto result =
      sample_in_blocks(model, process, {65}, 2, options_for(DiffusionMethod::confidence, 0.0), torch::kCPU);
  EXPECT_EQ(result.blocks, 1);
  EXPECT_EQ(result.tokens.size(1), 1 + 4);
  EXPECT_TRUE(result.tokens.narrow(1, 1, 4).eq(process.end_id).all().item<bool>());
  EXPECT_TRUE(generated_until_end(result.tokens[0], result.fixed[0], process.end_id).empty());
}

TEST(BlockSampler, RefusesACacheWithoutBlockTrainingAndTextsPastTheContext) {
  auto model = random_model(73);
  auto options = options_for(DiffusionMethod::ancestral, 1.0);
  options.use_cache = true;
  EXPECT_THROW(sample_in_blocks(model, byte_process(0), {65}, 1, options, torch::kCPU), InputError);
  options.use_cache = false;
  options.max_new_tokens = 64;  // 1 + 64 > max_seq_len = 64
  EXPECT_NE(testing::input_error_of([&] {
              sample_in_blocks(model, byte_process(0), {65}, 1, options, torch::kCPU);
            }).find("model.max_seq_len = 64"),
            std::string::npos);
}

}  // namespace
}  // namespace inkstone
