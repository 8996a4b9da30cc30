// The path the RL user takes: import a Hugging Face policy, post-train it with GFlowRL on GSM8K-format problems
// (configs/gflowrl-gsm8k.toml at toy scale), export the result, and load it back with transformers.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "tests/cli_run.h"
#include "tools/run_setup.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::hf_fixture;
using testing::run_cli;

void write_problems(const fs::path& file) {
  std::ofstream out(file);
  for (int i = 1; i <= 8; ++i) {
    const nlohmann::json problem = {{"question", "What is " + std::to_string(i) + " plus 3?"},
                                    {"answer", std::to_string(i) + " + 3 = " + std::to_string(i + 3) + "\n#### " +
                                                   std::to_string(i + 3)}};
    out << problem.dump() << "\n";
  }
}

double largest_change(const fs::path& before, const fs::path& after) {
  const SafetensorsReader a(before), b(after);
  double largest = 0.0;
  for (const auto& tensor : a.tensors())
    largest = std::max(largest, (a.read(tensor.name) - b.read(tensor.name)).abs().max().item<double>());
  return largest;
}

TEST(RlFromImport, GflowrlTrainsAnImportedPolicyAndTheExportLoadsInTransformers) {
  const auto dir = testing::temp_dir("rl_from_import");
  write_problems(dir / "problems.jsonl");
  const auto imported = run_cli({"import", "hf", hf_fixture("qwen3_tied").string(), "--out", (dir / "policy").string()});
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  // The format reward varies within a group for a random policy, so the update is not the degenerate zero.
  const auto trained = run_cli({"train", (testing::source_dir() / "configs" / "gflowrl-gsm8k.toml").string(),
                                "--run-dir", (dir / "rl").string(),
                                "--set", "rl.init_checkpoint=" + (dir / "policy").string(),
                                "--set", "rl.task_path=" + (dir / "problems.jsonl").string(),
                                "--set", "rl.eval_path=" + (dir / "problems.jsonl").string(),
                                "--set", "rl.rewards=[\"correct\", \"format=0.5\"]",
                                "--set", "rl.prompts_per_step=4", "--set", "rl.group_size=4",
                                "--set", "rl.mini_batches=2", "--set", "rl.max_new_tokens=24",
                                "--set", "rl.eval_prompts=4", "--set", "rl.eval_samples=2",
                                "--set", "optim.learning_rate=1e-3", "--set", "schedule.warmup_steps=0",
                                "--set", "train.steps=2", "--set", "train.eval_interval=2",
                                "--set", "train.checkpoint_interval=2", "--set", "run.device=cpu",
                                "--set", "run.precision=fp32", "--set", "run.threads=1"});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto step = dir / "rl" / "checkpoints" / "step_000002";
  ASSERT_TRUE(fs::exists(step / "model.safetensors")) << trained.output;
  EXPECT_GT(largest_change(dir / "policy" / "checkpoints" / "step_000000" / "model.safetensors",
                           step / "model.safetensors"),
            1e-5);
  // The RL run prompts in the imported chat format and stops at its end-of-turn token.
  const auto policy = cli::load_trained_model((dir / "rl").string(), "cpu");
  EXPECT_STREQ(choice_name(policy.config.chat.format), "chatml");

  const auto exported = run_cli({"export", "hf", (dir / "rl").string(), "--out", (dir / "export").string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const auto python = testing::reference_python();
  if (python.empty()) GTEST_SKIP() << "no .venv with transformers (make setup-python)";
  std::ofstream(dir / "ids.txt") << "401 5 9 33 120 7 402 2 300 45\n";
  const auto dumped = run_cli({"eval", "--run-dir", (dir / "rl").string(), "--token-ids", (dir / "ids.txt").string(),
                               "--dump-logits", (dir / "logits.safetensors").string()});
  ASSERT_EQ(dumped.exit_code, 0) << dumped.output;
  const auto checked = testing::run_command(
      {python.string(), (testing::source_dir() / "tests" / "interop" / "check_with_transformers.py").string(),
       (dir / "export").string(), (dir / "logits.safetensors").string()});
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  const auto report = nlohmann::json::parse(checked.output.substr(checked.output.rfind('{')));
  EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-4);
  EXPECT_EQ(report["model_class"], "Qwen3ForCausalLM");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace inkstone
