// The dry run's memory plan: its parameter counts equal the built model's for every zoo variant (so the weight,
// gradient and optimizer bytes rest on exact counts), and the ZeRO stages and activation checkpointing move the
// bytes the way docs/training.md, "Memory", says. How close the whole prediction comes to a measured peak is
// bench/memory/run's job.
#include <gtest/gtest.h>

#include "models/block.h"
#include "models/language_model.h"
#include "models/model_dims.h"
#include "tests/zoo_fixtures.h"
#include "train/memory_plan.h"

namespace inkstone {
namespace {

constexpr int64_t kVocab = 61;

class MemoryPlanZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(MemoryPlanZoo, CountsTheBuiltModelsParameters) {
  const auto path = testing::zoo_config_path(GetParam()).string();
  const Config base = load_config(path);
  for (const bool conditioned : {false, true}) {
    auto overrides = testing::tiny_zoo_model_overrides(base);
    overrides.push_back(conditioned ? "model.time_conditioning=true" : "model.time_conditioning=false");
    if (conditioned) overrides.push_back("model.tie_embeddings=false");
    const Config config = load_config(path, overrides);
    const auto model = build_language_model(config.model, kVocab);
    int64_t branches = 0, largest = 0;
    for (const auto& module : *model->blocks) {
      const auto& block = *module->as<BlockImpl>();
      int64_t mixer = 0, ffn = 0;
      for (const auto& p : block.attn_norm->parameters()) mixer += p.numel();
      for (const auto& p : block.mixer->parameters()) mixer += p.numel();
      for (const auto& p : block.mlp_norm->parameters()) ffn += p.numel();
      for (const auto& p : block.ffn->parameters()) ffn += p.numel();
      branches += mixer + ffn;
      largest = std::max({largest, mixer, ffn});
    }
    const MemoryPlan plan = plan_memory(config, kVocab, 1, false);
    EXPECT_EQ(plan.parameters, model->param_counts().total) << GetParam() << " conditioned=" << conditioned;
    EXPECT_EQ(plan.branch_parameters, branches) << GetParam() << " conditioned=" << conditioned;
    EXPECT_EQ(plan.largest_branch, largest) << GetParam() << " conditioned=" << conditioned;
  }
}

// With LoRA the plan counts the adapters beside the frozen weights, and plans gradients and moments for them alone.
TEST_P(MemoryPlanZoo, CountsTheAdaptersALoraRunTrains) {
  const auto path = testing::zoo_config_path(GetParam()).string();
  auto overrides = testing::tiny_zoo_model_overrides(load_config(path));
  overrides.push_back("model.lora_rank=3");
  overrides.push_back("model.moe_bias_update_rate=0");  // it would move the frozen routers
  const Config config = load_config(path, overrides);
  const auto model = build_language_model(config.model, kVocab);
  int64_t trainable = 0;
  for (const auto& p : model->parameters())
    if (p.requires_grad()) trainable += p.numel();
  const MemoryPlan plan = plan_memory(config, kVocab, 1, false);
  EXPECT_GT(trainable, 0) << GetParam();
  EXPECT_EQ(plan.trained_parameters, trainable) << GetParam();
  EXPECT_EQ(plan.parameters, model->param_counts().total) << GetParam();
  EXPECT_DOUBLE_EQ(plan.optimizer, 8.0 * static_cast<double>(trainable)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Zoo, MemoryPlanZoo, ::testing::ValuesIn(testing::zoo_config_names()),
                         [](const auto& info) { return testing::zoo_test_name(info.param); });

TEST(MemoryPlan, StagesShardWhatTheySayAndRecomputationKeepsBranchInputs) {
  Config config =
      load_config((testing::source_dir() / "configs" / "ar-tiny.toml").string(), {"train.batch_size=16", "train.grad_accum=1"});
  const auto at = [&](int64_t stage, int64_t every) {
    Config c = config;
    c.distributed.zero_stage = stage;
    c.train.activation_checkpointing = every;
    return plan_memory(c, kVocab, 4, false);
  };
  const MemoryPlan ddp = at(0, 0);
  const double p = static_cast<double>(ddp.parameters);
  EXPECT_EQ(ddp.micro_batch_rows, 4);
  EXPECT_DOUBLE_EQ(ddp.weights, 4 * p);
  EXPECT_DOUBLE_EQ(ddp.optimizer, 8 * p);
  EXPECT_DOUBLE_EQ(at(1, 0).optimizer, 2 * p);
  EXPECT_DOUBLE_EQ(at(1, 0).gradients, 4 * p);
  EXPECT_DOUBLE_EQ(at(2, 0).gradients, p);
  EXPECT_DOUBLE_EQ(at(2, 0).weights, 4 * p);
  const MemoryPlan three = at(3, 0);
  const double branches = static_cast<double>(three.branch_parameters);
  EXPECT_DOUBLE_EQ(three.weights, 4 * (p - branches + branches / 4 + 2 * three.largest_branch));
  EXPECT_EQ(three.activations, ddp.activations);
  // One process: no buckets, nothing sharded, whatever the stage says.
  config.distributed.zero_stage = 3;
  const MemoryPlan single = plan_memory(config, kVocab, 1, false);
  EXPECT_EQ(single.zero_stage, 0);
  EXPECT_EQ(single.gradient_buffers, 0);
  EXPECT_DOUBLE_EQ(single.optimizer, 8 * p);
  EXPECT_LT(at(0, 1).activations, ddp.activations);
  EXPECT_LT(at(0, 1).activations, at(0, 2).activations);
}

// An RL run (train/memory_plan.h, plan_rollout_memory): the update's rows are a rank's groups per mini-batch times
// the forwards each row costs, at the rows' length; the reference policy is a whole frozen copy unless LoRA's base
// is the reference; rollouts hold a causal policy's KV cache and logits rows, or a canvas's logits, beside (not on
// top of) the update's activations.
TEST(MemoryPlan, AnRlRunPlansItsUpdateRowsReferenceAndRollouts) {
  Config config = load_config((testing::source_dir() / "configs" / "ar-tiny.toml").string(),
                              {"objective.name=\"grpo\"", "rl.prompts_per_step=8", "rl.group_size=4",
                               "rl.mini_batches=2"});
  RolloutPolicyShape causal;
  causal.row_tokens = 40;
  const MemoryPlan plan = plan_rollout_memory(config, kVocab, 2, false, causal);
  EXPECT_EQ(plan.micro_batch_rows, 8 / 2 / 2 * 4);
  EXPECT_DOUBLE_EQ(plan.reference_weights, 4.0 * static_cast<double>(plan.parameters));
  const ModelConfig& m = config.model;
  const double rows = 8 / 2 * 4;
  const double vocab = static_cast<double>(m.vocab_size > 0 ? m.vocab_size : kVocab);
  const auto cache_at = [&](double slots) {
    return 2.0 * static_cast<double>(m.n_layers * m.n_kv_heads * resolved_head_dim(m)) * rows * slots * 4.0;
  };
  // rl.keep_decoder (the default): the cache, with 8 slots of a CUDA row's run past its end, in whole steps of 64
  // slots, also stays through the update.
  EXPECT_DOUBLE_EQ(plan.rollouts, cache_at(64) + 12.0 * rows * vocab);
  EXPECT_DOUBLE_EQ(plan.kept_rollout_cache, cache_at(64));
  EXPECT_DOUBLE_EQ(plan.total(), plan.weights + plan.gradients + plan.gradient_buffers + plan.optimizer +
                                     plan.reference_weights +
                                     std::max(plan.activations + plan.vocabulary_loss + cache_at(64), plan.rollouts));
  Config unkept = config;
  unkept.rl.keep_decoder = false;
  const MemoryPlan per_step = plan_rollout_memory(unkept, kVocab, 2, false, causal);
  EXPECT_DOUBLE_EQ(per_step.rollouts, cache_at(40) + 12.0 * rows * vocab);
  EXPECT_EQ(per_step.kept_rollout_cache, 0.0);
  RolloutPolicyShape longer = causal;
  longer.row_tokens = 60;  // 60 + 8 slots: two steps of 64
  EXPECT_DOUBLE_EQ(plan_rollout_memory(config, kVocab, 2, false, longer).kept_rollout_cache, cache_at(128));
  // Decoding by CUDA graphs: the kept graphs of the buckets 16, 8, 4, 2, 1 hold about 31 rows of float32 logits
  // (float32 weights: the head's output is the logits), beside the cache in both phases; none when not kept.
  RolloutPolicyShape graphed = causal;
  graphed.graphed = true;
  const MemoryPlan with_graphs = plan_rollout_memory(config, kVocab, 2, false, graphed);
  EXPECT_DOUBLE_EQ(with_graphs.kept_rollout_graphs, 31.0 * vocab * 4.0);
  EXPECT_DOUBLE_EQ(with_graphs.rollouts, plan.rollouts + 31.0 * vocab * 4.0);
  EXPECT_DOUBLE_EQ(with_graphs.total() - plan.total(), 31.0 * vocab * 4.0);
  EXPECT_EQ(plan_rollout_memory(unkept, kVocab, 2, false, graphed).kept_rollout_graphs, 0.0);
  Config six = config;
  six.rl.group_size = 6;  // 24 rows: the buckets 24, 16, 8, 4, 2, 1
  EXPECT_DOUBLE_EQ(plan_rollout_memory(six, kVocab, 2, false, graphed).kept_rollout_graphs, 55.0 * vocab * 4.0);
  // The window plan of the same model at the same rows and length has the same activations.
  Config windows = config;
  windows.objective.name = "ar";
  windows.data.seq_len = 40;
  windows.train.batch_size = 2 * 8;
  windows.train.grad_accum = 1;
  EXPECT_DOUBLE_EQ(plan_memory(windows, kVocab, 2, false).activations, plan.activations);

  RolloutPolicyShape denoised;
  denoised.causal = false;
  denoised.forward_rows_per_rollout = 4;
  denoised.row_tokens = 40;
  const MemoryPlan diffusion = plan_rollout_memory(config, kVocab, 2, false, denoised);
  EXPECT_EQ(diffusion.micro_batch_rows, 4 * 8);
  EXPECT_DOUBLE_EQ(diffusion.rollouts, 4.0 * rows * 40.0 * vocab);

  config.rl.reference = ReferencePolicy::old;
  EXPECT_EQ(plan_rollout_memory(config, kVocab, 2, false, causal).reference_weights, 0.0);
}

// The vocabulary loss (docs/training.md, "The vocabulary loss in chunks"): the head's input gradient per token, the
// head's fp32 weight gradient, and one chunk of logits whose rows shrink as V grows, so that beyond the weight
// gradient the loss's memory does not grow with V, nor with the batch beyond the per-token gradient.
TEST(MemoryPlan, TheVocabularyLossHoldsOneChunkWhateverTheVocabularyAndBatch) {
  const auto plan_at = [](int64_t vocab, int64_t rows, const std::string& objective) {
    const Config c = load_config((testing::source_dir() / "configs" / "ar-tiny.toml").string(),
                                 {"train.batch_size=" + std::to_string(rows), "train.grad_accum=1",
                                  "data.seq_len=1024", "model.max_seq_len=1024", "objective.logit_chunk_mib=256",
                                  "objective.name=\"" + objective + "\""});
    return plan_memory(c, vocab, 1, false);
  };
  const MemoryPlan small = plan_at(50304, 32, "ar"), large = plan_at(151669, 32, "ar");
  const double d = static_cast<double>(load_config((testing::source_dir() / "configs" / "ar-tiny.toml").string())
                                           .model.d_model);
  const double per_token = 32.0 * 1024 * d * 4;
  const double chunk = 5 * 256.0 * 1024 * 1024;  // 5 copies of 256 MiB, to within a row of V floats
  EXPECT_NEAR(small.vocabulary_loss, per_token + 4.0 * 50304 * d + chunk, 5 * 4.0 * 151669);
  EXPECT_NEAR(large.vocabulary_loss, per_token + 4.0 * 151669 * d + chunk, 5 * 4.0 * 151669);
  // Twice the rows: only the per-token gradient doubles.
  EXPECT_NEAR(plan_at(151669, 64, "ar").vocabulary_loss - large.vocabulary_loss, per_token, 1.0);
  // Uniform diffusion's NELBO keeps 9 copies of a chunk.
  EXPECT_NEAR(plan_at(151669, 32, "uniform_diffusion").vocabulary_loss - large.vocabulary_loss, 4 * 256.0 * 1024 * 1024,
              4 * 4.0 * 151669);
  EXPECT_EQ(large.total() - large.vocabulary_loss,
            large.weights + large.gradients + large.gradient_buffers + large.optimizer + large.master_weights +
                large.activations);
}

}  // namespace
}  // namespace inkstone
