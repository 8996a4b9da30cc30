// Block diffusion (BD3-LM): the block-causal rule over [x_0 | x_t], per-block times, and what a block's loss may
// depend on: its own noisy tokens and the clean tokens of earlier blocks, never later blocks or other noisy blocks.
#include <gtest/gtest.h>

#include "dataset/byte_tokenizer.h"
#include "models/attention_mask.h"
#include "objectives/diffusion_objective.h"
#include "objectives/diffusion_time.h"
#include "objectives/uniform_noise.h"
#include "tests/fixtures.h"
#include "tests/objectives/diffusion_fixtures.h"

namespace inkstone {
namespace {
using testing::random_batch;
using testing::randomise;
using testing::tiny_config;

TEST(BlockDiffusionRule, TrainingLayoutOfTwoBlocksOfTwo) {
  // Rows are queries, columns keys: x_0 positions 0..3 (blocks 0, 0, 1, 1), then x_t positions 0..3.
  const auto rule = block_diffusion_training_rule(4, 2, torch::kCPU).to(torch::kLong);
  const auto expected = torch::tensor({{1, 1, 0, 0, 0, 0, 0, 0},
                                       {1, 1, 0, 0, 0, 0, 0, 0},
                                       {1, 1, 1, 1, 0, 0, 0, 0},
                                       {1, 1, 1, 1, 0, 0, 0, 0},
                                       {0, 0, 0, 0, 1, 1, 0, 0},
                                       {0, 0, 0, 0, 1, 1, 0, 0},
                                       {1, 1, 0, 0, 0, 0, 1, 1},
                                       {1, 1, 0, 0, 0, 0, 1, 1}},
                                      torch::kLong);
  EXPECT_TRUE(rule.equal(expected)) << rule;
}

TEST(BlockDiffusionTime, EachBlockHasOneTimeStratifiedOverAllBlocks) {
  DiffusionConfig config = default_config().diffusion;
  torch::manual_seed(61);
  // 3 rows of 8 tokens in blocks of 2: 12 block draws.
  const auto t = per_block_times(sample_training_time(config, 12, 2, 0, 12, torch::kCPU), 3, 8);
  ASSERT_EQ(t.sizes(), (std::vector<int64_t>{3, 8}));
  const auto blocks = t.view({3, 4, 2});
  EXPECT_TRUE(blocks.select(2, 0).equal(blocks.select(2, 1)));
  const auto u = (blocks.select(2, 0).to(torch::kDouble) - config.t_min) / (1.0 - config.t_min);
  EXPECT_TRUE((u.reshape({12}) * 12).floor().equal(torch::arange(12, torch::kDouble)));
}

TEST(BlockDiffusionObjective, ABlocksScoresIgnoreLaterBlocksAndOtherNoisyBlocks) {
  torch::manual_seed(62);
  const Config config = tiny_config("uniform_diffusion", false, {"diffusion.block_size=4"});
  DiffusionObjective objective(config, ByteTokenizer(), std::make_shared<UniformNoise>(config.diffusion));
  auto model = build_language_model(config.model, 260);
  randomise(*model);
  const Batch batch = random_batch(2, 12);  // blocks [0, 4), [4, 8), [8, 12)
  const auto t = torch::full({2, 12}, 0.5f);
  const auto z = objective.corrupt(batch.tokens, t, nullptr);
  const auto base = objective.score(*model, batch, t, z).nelbo;
  EXPECT_TRUE(base.isfinite().all().item<bool>());

  // Changing clean and noisy tokens of block 2 leaves blocks 0 and 1 as they were; block 2 changes.
  Batch later = batch;
  later.tokens = batch.tokens.clone();
  later.tokens.narrow(1, 8, 2).fill_(65);
  auto z_later = z.clone();
  z_later.narrow(1, 8, 4).fill_(66);
  const auto changed = objective.score(*model, later, t, z_later).nelbo;
  EXPECT_TRUE(changed.narrow(1, 0, 8).equal(base.narrow(1, 0, 8)));
  EXPECT_FALSE(changed.narrow(1, 8, 4).equal(base.narrow(1, 8, 4)));

  // Block 1's noisy tokens do not reach block 0 or block 2; block 0's clean tokens reach blocks 1 and 2.
  auto z_middle = z.clone();
  z_middle.narrow(1, 4, 4).fill_(67);
  const auto middle = objective.score(*model, batch, t, z_middle).nelbo;
  EXPECT_TRUE(middle.narrow(1, 0, 4).equal(base.narrow(1, 0, 4)));
  EXPECT_TRUE(middle.narrow(1, 8, 4).equal(base.narrow(1, 8, 4)));
  Batch earlier = batch;
  earlier.tokens = batch.tokens.clone();
  earlier.tokens.narrow(1, 0, 4).fill_(68);
  const auto first = objective.score(*model, earlier, t, z).nelbo;
  EXPECT_FALSE(first.narrow(1, 8, 4).equal(base.narrow(1, 8, 4)));
}

TEST(BlockDiffusionObjective, TrainsWithAGradientAndRefusesWhatCannotWork) {
  torch::manual_seed(63);
  const Config config = tiny_config("masked_diffusion", false, {"diffusion.block_size=8"});
  auto objective = make_objective(config, ByteTokenizer());
  auto model = build_language_model(config.model, 260);
  const LossOutput out = objective->loss(*model, random_batch(3, 16));
  EXPECT_TRUE(std::isfinite(out.loss_sum.item<double>()));
  out.loss_sum.backward();
  EXPECT_GT(model->embed->weight.grad().abs().sum().item<double>(), 0.0);

  using testing::input_error_of;
  EXPECT_NE(input_error_of([] {
              tiny_config("uniform_diffusion", false, {"diffusion.block_size=5"});
            }).find("diffusion.block_size = 5 must divide data.seq_len = 16"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              tiny_config("uniform_diffusion", false, {"diffusion.block_size=4", "model.mixer_pattern=\"AC\""});
            }).find("attention-only"),
            std::string::npos);
  EXPECT_NE(input_error_of([] { tiny_config("ar", false, {"diffusion.block_size=4"}); }).find("diffusion objective"),
            std::string::npos);
}

}  // namespace
}  // namespace inkstone
