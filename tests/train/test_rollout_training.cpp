// RL training end to end at toy scale (rollout, reward, old/ref log-probs, epochs of mini-batch updates, eval,
// checkpoint) for every rollout objective, through the training session and the rollout step source.
#include <cmath>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "dataset/byte_tokenizer.h"
#include "objectives/objective.h"
#include "rl/rollout_source.h"
#include "tests/objectives/rollout_fixtures.h"
#include "tests/test_paths.h"
#include "train/session.h"

namespace inkstone {
namespace {

// Shrinks a config to toy scale: the tiny policy, two prompts of four rollouts, two steps.
Config toy_scale(Config config) {
  config.model = testing::tiny_policy_config();
  config.model.max_seq_len = 160;  // GSM8K prompts are longer than the arithmetic ones
  config.data.seq_len = 160;       // a valid config (a resume parses the checkpoint's)
  config.run.device = DeviceChoice::cpu;
  config.run.precision = FloatFormat::fp32;
  config.run.threads = 1;
  config.rl.prompts_per_step = 2;
  config.rl.group_size = 4;
  config.rl.epochs = 2;
  config.rl.mini_batches = 2;
  config.rl.max_new_tokens = 8;
  config.rl.eval_prompts = 2;
  config.rl.eval_samples = 2;
  config.train.steps = 2;
  config.train.eval_interval = 0;
  config.train.checkpoint_interval = 0;
  config.schedule.warmup_steps = 0;
  return config;
}

// A toy run's metrics lines and result; its folder is removed.
struct ToyRun {
  std::vector<nlohmann::json> lines;
  TrainResult result;
};

ToyRun train_toy(const Config& config, const std::string& name) {
  auto tokenizer = std::make_shared<ByteTokenizer>();
  const auto run_dir = testing::temp_dir("rl_" + name);
  torch::manual_seed(5);
  TrainingSession session(config, build_language_model(config.model, tokenizer->vocab_size()),
                          make_objective(config, *tokenizer), tokenizer, run_dir, torch::kCPU);
  RolloutSource source(session);
  ToyRun run;
  source.on_step = [&](int64_t, const nlohmann::json& line) { run.lines.push_back(line); };
  run.result = session.run(source);
  EXPECT_TRUE(std::filesystem::exists(run.result.last_checkpoint / "model.safetensors"));
  std::filesystem::remove_all(run_dir);
  return run;
}

void run_toy(const Config& config, const std::string& name) {
  const auto [lines, result] = train_toy(config, name);
  EXPECT_EQ(result.steps_done, 2);
  ASSERT_EQ(lines.size(), 2u);
  for (const char* key : {"reward_mean", "reward_std", "accuracy", "degenerate_groups", "entropy", "kl_old_ref_k3",
                          "response_length_mean", "truncated_fraction", "rollout_tokens_per_s",
                          "train_tokens_per_s", "rollout_drift_ratio_mean", "loss", "grad_norm", "lr"}) {
    ASSERT_TRUE(lines.back().contains(key)) << key;
    EXPECT_TRUE(std::isfinite(lines.back()[key].get<double>())) << key;
  }
  // Same weights, same kernels: the sampler's and the trainer's sequence log-probs agree (docs/rl.md,
  // "Rollout drift").
  EXPECT_NEAR(lines.front()["rollout_drift_ratio_mean"].get<double>(), 1.0, 1e-3);
  EXPECT_TRUE(result.final_eval.count("pass@1"));
  EXPECT_TRUE(result.final_eval.count("pass@2"));
}

void run_arithmetic(const std::string& objective_name) {
  Config config = toy_scale(default_config());
  config.objective.name = objective_name;
  config.rl.task = "arithmetic";
  run_toy(config, objective_name);
}

TEST(RolloutTraining, GflowrlRunsEndToEnd) { run_arithmetic("gflowrl"); }

// A LoRA policy (models/lora.h) trains its adapters alone, and its reference is its frozen base with the adapters
// off: the same model as the policy at the first step (KL exactly 0), another one once the adapters moved (after
// the first step whose groups are not all alike, so that the gradient is not 0).
TEST(RolloutTraining, ALoraPolicyTrainsItsAdaptersAgainstItsBase) {
  Config config = toy_scale(default_config());
  config.objective.name = "grpo";
  config.train.steps = 3;
  config.rl.task = "arithmetic";
  // A random policy answers right by chance only: the seed picks draws that do so in the first steps (the draws
  // are keyed, so they are the same on every machine).
  config.rl.group_size = 16;
  config.rl.difficulty = 1;
  config.run.seed = 4;
  config.optim.learning_rate = 1e-2;
  config.model.lora_rank = 2;
  auto tokenizer = std::make_shared<ByteTokenizer>();
  torch::manual_seed(5);
  auto model = build_language_model(config.model, tokenizer->vocab_size());
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : model->named_parameters()) before[item.key()] = item.value().clone();
  TrainingSession session(config, model, make_objective(config, *tokenizer), tokenizer,
                          testing::temp_dir("rl_lora"), torch::kCPU);
  RolloutSource source(session);
  std::vector<nlohmann::json> lines;
  source.on_step = [&](int64_t, const nlohmann::json& line) { lines.push_back(line); };
  session.run(source);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["kl_old_ref_k3"].get<double>(), 0.0);
  size_t moved = 0;  // the first step with a gradient
  while (moved < lines.size() && lines[moved]["grad_norm"].get<double>() == 0.0) {
    EXPECT_EQ(lines[moved]["kl_old_ref_k3"].get<double>(), 0.0) << "step " << moved + 1;
    ++moved;
  }
  ASSERT_LT(moved + 1, lines.size());
  EXPECT_GT(lines[moved + 1]["kl_old_ref_k3"].get<double>(), 0.0);
  bool adapters_moved = false;
  for (const auto& item : session.model()->named_parameters()) {
    const bool adapter = item.key().find(".lora.") != std::string::npos;
    const bool same = item.value().equal(before.at(item.key()));
    if (adapter) adapters_moved = adapters_moved || !same;

    else EXPECT_TRUE(same) << item.key() << " moved";
  }
  EXPECT_TRUE(adapters_moved);
}
TEST(RolloutTraining, GrpoRunsEndToEnd) { run_arithmetic("grpo"); }
TEST(RolloutTraining, FlowrlRunsEndToEnd) { run_arithmetic("flowrl"); }

// Stopping after step 2 and resuming from its checkpoint ends at the same weights (policy and FlowRL's log Z
// head) as one uninterrupted run: prompts and rollout seeds depend on the step only, and mini-batch orders on
// (seed, step, epoch).
TEST(RolloutTraining, ResumeContinuesTheUninterruptedRun) {
  Config config = toy_scale(default_config());
  config.objective.name = "flowrl";
  config.rl.task = "arithmetic";
  config.train.steps = 4;
  config.train.checkpoint_interval = 2;
  // The first half runs with train.steps = 2, so the schedule must not depend on the total; the warmup spans the
  // resume (4 optimizer steps per RL step), so the restored optimizer step count matters.
  config.schedule.kind = LrScheduleKind::constant;
  config.schedule.warmup_steps = 6;
  auto tokenizer = std::make_shared<ByteTokenizer>();
  // Trains in `run_dir` from a fresh policy, or from `checkpoint` when given.
  auto train_in = [&](const std::filesystem::path& run_dir, const Config& c, const CheckpointData* checkpoint) {
    torch::manual_seed(5);
    TrainingSession session(c, build_language_model(c.model, tokenizer->vocab_size()), make_objective(c, *tokenizer),
                            tokenizer, run_dir, torch::kCPU);
    RolloutSource source(session);
    if (checkpoint) session.resume(*checkpoint, source);
    return session.run(source);
  };
  const auto straight_dir = testing::temp_dir("rl_resume_straight");
  const TrainResult straight = train_in(straight_dir, config, nullptr);

  const auto split_dir = testing::temp_dir("rl_resume_split");
  Config first_half = config;
  first_half.train.steps = 2;
  train_in(split_dir, first_half, nullptr);
  const CheckpointData halfway = load_checkpoint(split_dir / "checkpoints" / "step_000002");
  const TrainResult second = train_in(split_dir, config, &halfway);

  EXPECT_EQ(second.steps_done, 4);
  const CheckpointData a = load_checkpoint(straight.last_checkpoint);
  const CheckpointData b = load_checkpoint(second.last_checkpoint);
  ASSERT_FALSE(a.objective.empty());  // the log Z head travels with the checkpoint
  auto expect_same = [](const NamedTensors& x, const NamedTensors& y) {
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].first, y[i].first);
      EXPECT_TRUE(torch::equal(x[i].second, y[i].second)) << x[i].first;
    }
  };
  expect_same(a.model, b.model);
  expect_same(a.objective, b.objective);
  std::filesystem::remove_all(straight_dir);
  std::filesystem::remove_all(split_dir);
}

// A diffusion policy (docs/rl.md, "Diffusion policies"): rollouts denoised from the prompt, log-probs by the
// chosen estimate, the objectives unchanged. With one update per rollout batch the trainer scores the rows it just
// scored as π_old, under the same weights and the same keyed noise, so every importance ratio is exactly 1.
void run_diffusion_policy(const std::string& objective, const std::string& policy, SequenceLikelihood likelihood,
                          bool time_conditioning) {
  Config config = toy_scale(default_config());
  config.objective.name = objective;
  config.rl.task = "arithmetic";
  config.rl.policy = policy;
  config.rl.likelihood = likelihood;
  config.rl.elbo_samples = 2;
  config.rl.epochs = 1;
  config.rl.mini_batches = 1;
  config.model.time_conditioning = time_conditioning;
  config.model.tie_embeddings = !time_conditioning;  // adaLN-Zero starts the head at zero
  config.sample.steps = 4;
  const auto [lines, result] = train_toy(config, "diffusion_" + objective);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    for (const char* key : {"reward_mean", "accuracy", "entropy", "kl_old_ref_k3", "response_length_mean",
                            "rollout_tokens_per_s", "loss", "grad_norm"}) {
      ASSERT_TRUE(line.contains(key)) << key;
      EXPECT_TRUE(std::isfinite(line[key].get<double>())) << key;
    }
    if (likelihood == SequenceLikelihood::transitions) {
      // The sampler reports the log-probs of its own transitions, which the trainer recomputes.
      EXPECT_NEAR(line["rollout_drift_ratio_mean"].get<double>(), 1.0, 1e-3) << line.dump();
    } else {
      EXPECT_FALSE(line.contains("rollout_drift_ratio_mean"));  // estimates: nothing of the sampler's to compare
    }
    if (line.contains("is_weight_min")) {
      EXPECT_EQ(line["is_weight_min"].get<double>(), 1.0) << line.dump();
      EXPECT_EQ(line["is_weight_max"].get<double>(), 1.0) << line.dump();
    }
    if (objective == "grpo") EXPECT_EQ(line["clip_fraction"].get<double>(), 0.0) << line.dump();
  }
  EXPECT_EQ(lines.front()["kl_old_ref_k3"].get<double>(), 0.0);  // the reference is the initial policy
  EXPECT_TRUE(result.final_eval.count("pass@2"));
}

TEST(RolloutTraining, GflowrlTrainsAUniformDiffusionPolicyByItsElbo) {
  run_diffusion_policy("gflowrl", "uniform_diffusion", SequenceLikelihood::elbo, /*time_conditioning=*/true);
}
TEST(RolloutTraining, GrpoTrainsAMaskedDiffusionPolicyByTheOneStepEstimate) {
  run_diffusion_policy("grpo", "masked_diffusion", SequenceLikelihood::one_step, false);
}
TEST(RolloutTraining, GflowrlTrainsAMaskedDiffusionPolicyByItsOwnTransitions) {
  run_diffusion_policy("gflowrl", "masked_diffusion", SequenceLikelihood::transitions, false);
}
TEST(RolloutTraining, FlowrlTrainsAMaskedDiffusionPolicyByItsElbo) {
  run_diffusion_policy("flowrl", "masked_diffusion", SequenceLikelihood::elbo, false);
}

// configs/gflowrl-gsm8k.toml as shipped, shrunk to toy scale, on three GSM8K-format problems.
TEST(RolloutTraining, Gsm8kConfigRunsAtToyScale) {
  const auto dir = testing::temp_dir("rl_gsm8k_problems");
  const auto problems = dir / "problems.jsonl";
  std::ofstream(problems)
      << R"({"question": "Tom has 3 apples and buys 4 more. How many now?", "answer": "3 + 4 = 7\n#### 7"})"
      << "\n"
      << R"({"question": "A box holds 12 pens. How many pens in 2 boxes?", "answer": "#### 24"})" << "\n"
      << R"({"question": "Sam had 1,000 dollars and spent 250. How much is left?", "answer": "#### 750"})" << "\n";
  Config config = toy_scale(load_config((testing::source_dir() / "configs" / "gflowrl-gsm8k.toml").string()));
  config.rl.task_path = problems.string();
  config.rl.eval_path = problems.string();
  run_toy(config, "gsm8k");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace inkstone
