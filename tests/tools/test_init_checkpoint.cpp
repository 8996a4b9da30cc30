// train.init_checkpoint (docs/training.md, "Starting from a checkpoint"): a run adopts its checkpoint's
// architecture and starts from its exact logits; AR checkpoints start masked and uniform diffusion runs (attention
// turned bidirectional, a time embedding and a head of its own added); other architecture changes and another tokenizer are refused by
// name; a started run resumes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "core/errors.h"
#include "interop/hf_weights.h"
#include "models/lora.h"
#include "tests/cli_run.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "tools/init_checkpoint.h"
#include "tools/run_setup.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

class InitCheckpoint : public ::testing::Test {
 protected:
  // An AR run of 3 steps on the word corpus (d_model 32), shared by the tests.
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("init_checkpoint"));
    const auto data = testing::prepare_word_corpus(*dir_);
    std::ofstream(*dir_ / "base.toml") << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                                       << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\n"
                                       << "max_seq_len = 32\n"
                                       << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                                       << "[train]\nsteps = 3\nbatch_size = 4\neval_interval = 0\n";
    const auto result = run_cli({"train", (*dir_ / "base.toml").string(), "--run-dir", base().string()});
    ASSERT_EQ(result.exit_code, 0) << result.output;
    // A run that starts from it: no [model] section at all, so the architecture is the checkpoint's.
    std::ofstream(*dir_ / "tuned.toml") << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                                        << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                                        << "[train]\nsteps = 2\nbatch_size = 4\neval_interval = 0\n"
                                        << "init_checkpoint = \"" << base().string() << "\"\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path base() { return *dir_ / "base_run"; }
  static fs::path tuned_config() { return *dir_ / "tuned.toml"; }
  static fs::path* dir_;
};
fs::path* InitCheckpoint::dir_ = nullptr;

TEST_F(InitCheckpoint, AdoptsTheArchitectureAndStartsFromTheCheckpointsLogits) {
  Config config = load_config(tuned_config().string());
  EXPECT_EQ(config.model.d_model, default_config().model.d_model);  // the file says nothing about [model]
  const auto tokenizer = cli::load_run_tokenizer(config);
  const auto initial = cli::adopt_initial_checkpoint(config, given_keys(tuned_config().string(), {}), *tokenizer);
  EXPECT_EQ(config.model.d_model, 32);
  EXPECT_EQ(config.model.n_kv_heads, 1);
  EXPECT_EQ(config.model.max_seq_len, 32);
  EXPECT_EQ(initial.checkpoint.step, 3);
  EXPECT_TRUE(initial.notes.empty());
  EXPECT_TRUE(initial.checkpoint.model.empty());  // adoption reads the description, not the weights
  EXPECT_TRUE(initial.checkpoint.optimizer.empty());

  auto model = build_language_model(config.model, tokenizer->vocab_size());
  EXPECT_TRUE(cli::load_initial_weights(*model, initial).empty());
  auto trained = cli::load_trained_model(base().string(), "cpu");
  const auto tokens = torch::randint(0, 256, {2, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  model->eval();
  WindowInputs window;
  EXPECT_TRUE(torch::equal(model->forward(tokens, window), trained.model->forward(tokens, window)));

  // Untied, the head starts as the embedding it was tied to: the same logits, and nothing new to announce.
  Config untied = load_config(tuned_config().string(), {"model.tie_embeddings=false"});
  const auto untied_initial =
      cli::adopt_initial_checkpoint(untied, given_keys(tuned_config().string(), {"model.tie_embeddings=false"}),
                                    *tokenizer);
  ASSERT_EQ(untied_initial.notes.size(), 1u);
  EXPECT_NE(untied_initial.notes[0].find("starting as a copy of the tied embedding"), std::string::npos);
  auto untied_model = build_language_model(untied.model, tokenizer->vocab_size());
  EXPECT_TRUE(cli::load_initial_weights(*untied_model, untied_initial).empty());
  untied_model->eval();
  EXPECT_TRUE(torch::allclose(untied_model->forward(tokens, window), trained.model->forward(tokens, window), 0, 1e-6));
}

TEST_F(InitCheckpoint, ArCheckpointsStartMaskedAndUniformDiffusionRuns) {
  const auto masked = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "mdlm").string(), "--set",
                               "objective.name=\"masked_diffusion\"", "--set", "diffusion.attention_anneal_steps=2",
                               "--set", "diffusion.shifted_outputs=true"});
  ASSERT_EQ(masked.exit_code, 0) << masked.output;
  // The adapted model samples with the alignment it trained with.
  const auto sampled = run_cli({"sample", "--run-dir", (*dir_ / "mdlm").string(), "--prompt", "ab", "--max-new-tokens",
                                "4", "--steps", "4"});
  EXPECT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_NE(masked.output.find("starting from " + base().string()), std::string::npos) << masked.output;
  EXPECT_NE(masked.output.find("attention: causal as trained (ar), bidirectional here (masked_diffusion)"),
            std::string::npos)
      << masked.output;

  const auto uniform = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "udlm").string(), "--set",
                                "objective.name=\"uniform_diffusion\"", "--set", "model.time_conditioning=true",
                                "--set", "model.tie_embeddings=false"});
  ASSERT_EQ(uniform.exit_code, 0) << uniform.output;
  EXPECT_NE(uniform.output.find("model.time_conditioning = true (the checkpoint's: false): new adaLN-Zero"),
            std::string::npos)
      << uniform.output;
  EXPECT_NE(uniform.output.find("new weight tensor(s) initialised as configured"), std::string::npos)
      << uniform.output;
  const CheckpointData done = load_checkpoint(*dir_ / "udlm");
  EXPECT_EQ(done.step, 2);  // the step count starts again: weights only
}

TEST_F(InitCheckpoint, AnotherArchitectureAMissingFolderAndAnotherTokenizerAreRefusedByName) {
  const auto wider = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "wider").string(), "--set",
                              "model.d_model=64"});
  EXPECT_EQ(wider.exit_code, 2) << wider.output;
  EXPECT_NE(wider.output.find("model.d_model = 64 here but 32 in train.init_checkpoint '" + base().string() + "'"),
            std::string::npos)
      << wider.output;

  const auto annealed_ar = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "annealed").string(),
                                    "--set", "diffusion.attention_anneal_steps=2"});
  EXPECT_EQ(annealed_ar.exit_code, 2) << annealed_ar.output;
  EXPECT_NE(annealed_ar.output.find("diffusion.attention_anneal_steps = 2 opens a causal model's attention for a "
                                    "diffusion objective"),
            std::string::npos)
      << annealed_ar.output;

  const auto missing = (*dir_ / "no-such-run").string();
  const auto absent = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "absent").string(), "--set",
                               "train.init_checkpoint=\"" + missing + "\""});
  EXPECT_EQ(absent.exit_code, 2) << absent.output;
  EXPECT_NE(absent.output.find("train.init_checkpoint = '" + missing + "' does not exist"), std::string::npos)
      << absent.output;

  const auto tok = run_cli({"tokenizer", "train", "--input", (*dir_ / "text" / "doc100.txt").string(), "--vocab",
                            "300", "--out", (*dir_ / "tok").string()});
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  const auto prepared = run_cli({"data", "prepare", "--input", (*dir_ / "text").string(), "--tokenizer",
                                 (*dir_ / "tok").string(), "--out", (*dir_ / "data-bpe").string()});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const auto other = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "other").string(), "--set",
                              "data.path=\"" + (*dir_ / "data-bpe").string() + "\""});
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("was trained with another tokenizer (byte, 260 ids)"), std::string::npos)
      << other.output;
}

// Adopting an architecture reads config.toml and tokenizer.json only: a damaged weights file is found when the
// weights are loaded, and --dry-run (which loads none) plans the adopted model without reading them.
TEST_F(InitCheckpoint, AdoptionReadsNoWeights) {
  const auto copy = *dir_ / "damaged";
  fs::copy(base(), copy, fs::copy_options::recursive);
  const auto step = copy / "checkpoints" / "step_000003";
  fs::resize_file(step / "model.safetensors", fs::file_size(step / "model.safetensors") / 2);

  const std::string init = "train.init_checkpoint=\"" + copy.string() + "\"";
  Config config = load_config(tuned_config().string(), {init});
  const auto tokenizer = cli::load_run_tokenizer(config);
  const auto initial = cli::adopt_initial_checkpoint(config, given_keys(tuned_config().string(), {}), *tokenizer);
  EXPECT_EQ(config.model.d_model, 32);
  auto model = build_language_model(config.model, tokenizer->vocab_size());
  try {
    cli::load_initial_weights(*model, initial);
    ADD_FAILURE() << "a truncated model.safetensors was loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: truncated"), std::string::npos) << e.what();
  }

  const auto planned = run_cli({"train", tuned_config().string(), "--dry-run", "--set", init});
  EXPECT_EQ(planned.exit_code, 0) << planned.output;
}

// A diffusion checkpoint as rl.init_checkpoint is routed to the diffusion policy (docs/rl.md, "Diffusion
// policies"), never decoded as a causal model: the RL run records rl.policy and the checkpoint's noise, denoises its
// rollouts (no sampler log-probs to compare), and `sample` on the RL run denoises too. A policy named against the
// checkpoint is refused by name.
TEST_F(InitCheckpoint, ADiffusionCheckpointIsRoutedToTheDiffusionPolicy) {
  const auto diffusion = (*dir_ / "mdlm-policy").string();
  const auto trained = run_cli({"train", tuned_config().string(), "--run-dir", diffusion, "--set",
                                "objective.name=\"masked_diffusion\"", "--set", "train.steps=1"});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::ofstream(*dir_ / "grpo.toml") << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                                     << "[objective]\nname = \"grpo\"\n"
                                     << "[rl]\ninit_checkpoint = \"" << diffusion << "\"\n"
                                     << "prompts_per_step = 2\ngroup_size = 2\nmax_new_tokens = 8\n"
                                     << "eval_prompts = 2\neval_samples = 2\n"
                                     << "[sample]\nsteps = 4\n"
                                     << "[train]\nsteps = 1\n";
  // The RL run's plan: its update rows are 2 prompts x G = 2, each scored at the ELBO's 4 noise levels.
  const auto planned = run_cli({"train", (*dir_ / "grpo.toml").string(), "--dry-run"});
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("micro-batch 16 rows"), std::string::npos) << planned.output;
  EXPECT_NE(planned.output.find("reference policy"), std::string::npos) << planned.output;
  EXPECT_NE(planned.output.find("rollouts "), std::string::npos) << planned.output;
  const auto rl_dir = *dir_ / "grpo";
  const auto rl = run_cli({"train", (*dir_ / "grpo.toml").string(), "--run-dir", rl_dir.string()});
  ASSERT_EQ(rl.exit_code, 0) << rl.output;
  const Config recorded = load_config((rl_dir / "config.toml").string());
  EXPECT_EQ(recorded.rl.policy, "masked_diffusion");
  std::ifstream metrics(rl_dir / "metrics.jsonl");
  int64_t train_lines = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto json = nlohmann::json::parse(line);
    if (json.at("split") != "train") continue;
    ++train_lines;
    EXPECT_FALSE(json.contains("rollout_drift_ratio_mean")) << line;
  }
  EXPECT_EQ(train_lines, 1);
  const auto sampled = run_cli({"sample", "--run-dir", rl_dir.string(), "--prompt", "1+1=", "--max-new-tokens", "4",
                                "--steps", "2"});
  EXPECT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_NE(sampled.output.find("positions, 2 steps"), std::string::npos) << sampled.output;  // denoised

  const auto named = run_cli({"train", (*dir_ / "grpo.toml").string(), "--run-dir", (*dir_ / "named").string(),
                              "--set", "rl.policy=\"ar\""});
  EXPECT_EQ(named.exit_code, 2) << named.output;
  EXPECT_NE(named.output.find("rl.policy = 'ar' but rl.init_checkpoint '" + diffusion +
                              "' was trained by objective 'masked_diffusion'"),
            std::string::npos)
      << named.output;
}

// LoRA from a checkpoint: only the adapters move; sample reads the adapted model and `export hf` writes the merged
// one; a run started from the LoRA run begins from its merged weights.
TEST_F(InitCheckpoint, LoraAdaptsAFrozenCheckpointAndExportsItMerged) {
  const auto run = *dir_ / "lora";
  const auto trained = run_cli({"train", tuned_config().string(), "--run-dir", run.string(), "--set",
                                "model.lora_rank=4", "--set", "optim.learning_rate=1e-2"});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("LoRA: rank-4 adapters (alpha 16) on every projection; every other weight frozen"),
            std::string::npos)
      << trained.output;
  const auto base_weights = load_checkpoint(base()).model, lora_weights = load_checkpoint(run).model;
  const std::map<std::string, torch::Tensor> base_map(base_weights.begin(), base_weights.end());
  int64_t moved = 0;
  for (const auto& [name, tensor] : lora_weights) {
    if (name.find(".lora.") != std::string::npos) {
      moved += !tensor.eq(0).all().item<bool>() && name.find(".lora.b") != std::string::npos;
      continue;
    }
    EXPECT_TRUE(tensor.equal(base_map.at(name))) << name << " moved";
  }
  EXPECT_GT(moved, 0);

  const auto sampled = run_cli({"sample", "--run-dir", run.string(), "--prompt", "the", "--max-new-tokens", "4"});
  EXPECT_EQ(sampled.exit_code, 0) << sampled.output;
  const auto exported = run_cli({"export", "hf", run.string(), "--out", (*dir_ / "lora-hf").string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  // The export holds the merged weights, W + (α / r) B A, and no adapter.
  std::map<std::string, torch::Tensor> merged(lora_weights.begin(), lora_weights.end());
  merge_lora_adapters(merged, load_config((run / "config.toml").string()).model);
  int64_t compared = 0;
  for (const auto& entry : fs::directory_iterator(*dir_ / "lora-hf")) {
    if (entry.path().extension() != ".safetensors") continue;
    for (const auto& [name, tensor] : read_safetensors(entry.path()).tensors) {
      EXPECT_EQ(name.find("lora"), std::string::npos) << name;
      for (const auto& [ours, value] : merged)
        if (hf_name(ours) == name) {
          EXPECT_TRUE(tensor.equal(value.to(tensor.scalar_type()))) << name;
          ++compared;
        }
    }
  }
  EXPECT_EQ(compared, static_cast<int64_t>(merged.size()));
  // transformers computes from the merged export what the adapted model computes.
  if (const auto python = testing::reference_python(); !python.empty()) {
    std::ofstream(*dir_ / "ids.txt") << "116 104 101 32 99 97 116\n97 32 100 111 103 32 115\n";
    const auto dumped = run_cli({"eval", "--run-dir", run.string(), "--token-ids", (*dir_ / "ids.txt").string(),
                                 "--dump-logits", (*dir_ / "lora-logits.safetensors").string()});
    ASSERT_EQ(dumped.exit_code, 0) << dumped.output;
    const auto checked = testing::run_command(
        {python.string(), (testing::source_dir() / "tests" / "interop" / "check_with_transformers.py").string(),
         (*dir_ / "lora-hf").string(), (*dir_ / "lora-logits.safetensors").string()});
    ASSERT_EQ(checked.exit_code, 0) << checked.output;
    const auto report = nlohmann::json::parse(checked.output.substr(checked.output.rfind('{')));
    EXPECT_LT(report["max_abs_diff"].get<double>(), 1e-4);
  }

  // With bf16 weights the base is the checkpoint's rounded to bf16 and stays so; the adapters train in fp32 masters.
  const auto bf16_run = *dir_ / "lora-bf16";
  const auto bf16 = run_cli({"train", tuned_config().string(), "--run-dir", bf16_run.string(), "--set",
                             "model.lora_rank=4", "--set", "optim.learning_rate=1e-2", "--set", "run.param_dtype=\"bf16\""});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  const CheckpointData bf16_done = load_checkpoint(bf16_run);
  int64_t bf16_moved = 0;
  for (const auto& [name, tensor] : bf16_done.model) {
    EXPECT_EQ(tensor.scalar_type(), torch::kBFloat16) << name;
    if (name.find(".lora.b") != std::string::npos) bf16_moved += !tensor.eq(0).all().item<bool>();
    else if (name.find(".lora.") == std::string::npos)
      EXPECT_TRUE(tensor.equal(base_map.at(name).to(torch::kBFloat16))) << name << " moved";
  }
  EXPECT_GT(bf16_moved, 0);

  const auto unanchored = run_cli({"train", (*dir_ / "base.toml").string(), "--run-dir", (*dir_ / "lora-alone").string(),
                                   "--set", "model.lora_rank=4"});
  EXPECT_EQ(unanchored.exit_code, 2) << unanchored.output;
  EXPECT_NE(unanchored.output.find("model.lora_rank = 4 adapts a trained model: set train.init_checkpoint"),
            std::string::npos)
      << unanchored.output;
  const auto continued = run_cli({"train", tuned_config().string(), "--run-dir", (*dir_ / "after-lora").string(),
                                  "--set", "train.init_checkpoint=\"" + run.string() + "\""});
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  EXPECT_NE(continued.output.find("the checkpoint's LoRA adapters merged into its weights"), std::string::npos)
      << continued.output;
}

// --resume reads the architecture from the initial checkpoint again and the weights from the run's own.
TEST_F(InitCheckpoint, ARunStartedFromACheckpointResumes) {
  const auto run = (*dir_ / "resumed").string();
  ASSERT_EQ(run_cli({"train", tuned_config().string(), "--run-dir", run}).exit_code, 0);
  const auto resumed = run_cli({"train", tuned_config().string(), "--run-dir", run, "--resume", "--set",
                                "train.steps=4"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from step 2"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("starting from"), std::string::npos) << resumed.output;
  EXPECT_EQ(load_checkpoint(fs::path(run)).step, 4);
}

}  // namespace
}  // namespace inkstone
