// `inkstone gen-ppl` end to end on tiny runs: a block-diffusion run trained as BD3-LM, an AR judge, the grid of
// samplers and step counts as a table and JSON, the AR baseline row, and the refusals (exit 2).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/cli_run.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

TEST(GenPpl, GridOfSamplersAndStepsUnderAJudge) {
  const fs::path dir = testing::temp_dir("gen_ppl");
  const auto data = testing::prepare_word_corpus(dir);
  const fs::path config = dir / "tiny.toml";
  std::ofstream(config) << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                        << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
                        << "attention_sink = true\n"
                        << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                        << "[train]\nsteps = 4\nbatch_size = 4\neval_interval = 4\neval_batches = 1\n"
                        << "checkpoint_interval = 4\n";
  const auto diffusion = dir / "udlm", judge = dir / "judge";
  ASSERT_EQ(run_cli({"train", config.string(), "--run-dir", diffusion.string(), "--set",
                     "objective.name=\"uniform_diffusion\"", "--set", "diffusion.block_size=4", "--set",
                     "diffusion.time_mix=0.5", "--set", "objective.z_loss=1e-4"})
                .exit_code,
            0);
  ASSERT_EQ(run_cli({"train", config.string(), "--run-dir", judge.string()}).exit_code, 0);

  const auto out = dir / "grid.json";
  const auto grid =
      run_cli({"gen-ppl", "--run-dir", diffusion.string(), "--judge", judge.string(), "--steps", "2,4", "--num", "3",
               "--max-new-tokens", "8", "--samplers", "ancestral,adaptive,semi-ar", "--thresholds", "0,0.5",
               "--out", out.string()});
  ASSERT_EQ(grid.exit_code, 0) << grid.output;
  EXPECT_NE(grid.output.find("| sampler | steps | threshold | cache | Gen PPL | entropy (nats) | tokens | model calls | "
                             "tokens/s | seconds |"),
            std::string::npos);
  const auto report = nlohmann::json::parse(std::ifstream(out));
  // The threshold axis applies to the adaptive sampler alone.
  ASSERT_EQ(report.at("grid").size(), 8u);
  const std::vector<std::string> samplers = {"ancestral", "ancestral", "adaptive", "adaptive",
                                             "adaptive",  "adaptive",  "semi-ar",  "semi-ar"};
  const std::vector<int64_t> steps = {2, 4, 2, 2, 4, 4, 2, 4};
  const std::vector<double> thresholds = {0, 0, 0, 0.5, 0, 0.5, 0, 0};
  for (size_t i = 0; i < 8; ++i) {
    const auto& row = report["grid"][i];
    EXPECT_EQ(row.at("sampler"), samplers[i]);
    EXPECT_EQ(row.at("steps"), steps[i]);
    EXPECT_EQ(row.at("threshold").get<double>(), thresholds[i]);
    EXPECT_LE(row.at("model_calls").get<int64_t>(), 3 * (steps[i] + 1)) << "at most steps + 1 per call";
    EXPECT_GE(row.at("model_calls").get<int64_t>(), 1);
    // Every text is scored with its closing end of text; Gen PPL is exp of the mean NLL.
    const double tokens = row.at("judge_tokens").get<double>();
    EXPECT_GE(tokens, 3.0);
    EXPECT_NEAR(row.at("gen_ppl").get<double>(), std::exp(row.at("judge_nll_sum").get<double>() / tokens),
                1e-9 * row.at("gen_ppl").get<double>());
    EXPECT_LE(row.at("mean_tokens").get<double>(), 8.0);
  }

  // The AR baseline row.
  const auto baseline = run_cli(
      {"gen-ppl", "--run-dir", judge.string(), "--judge", judge.string(), "--num", "2", "--max-new-tokens", "6"});
  ASSERT_EQ(baseline.exit_code, 0) << baseline.output;
  EXPECT_NE(baseline.output.find("| autoregressive | - |"), std::string::npos);

  // A judge that is not autoregressive, and an unknown sampler, are refused.
  EXPECT_EQ(run_cli({"gen-ppl", "--run-dir", diffusion.string(), "--judge", diffusion.string()}).exit_code, 2);
  EXPECT_EQ(
      run_cli({"gen-ppl", "--run-dir", diffusion.string(), "--judge", judge.string(), "--samplers", "magic"}).exit_code,
      2);
}

}  // namespace
}  // namespace inkstone
