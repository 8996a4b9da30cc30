// Sweeps (sweep/, tools/cmd_sweep.cpp): the sweep file's checks, iso-token and iso-FLOP step budgets from the
// model's own FLOP count, and a sweep that, killed or rerun, keeps its finished runs and reports on all of them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "dataset/byte_tokenizer.h"
#include "models/language_model.h"
#include "sweep/sweep_report.h"
#include "tests/cli_run.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

class Sweeps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("sweeps"));
    const auto data = testing::prepare_word_corpus(*dir_);
    std::ofstream(*dir_ / "base.toml") << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                                       << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\n"
                                       << "max_seq_len = 32\n"
                                       << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                                       << "[train]\nsteps = 4\nbatch_size = 4\nlog_interval = 1\neval_interval = 0\n"
                                       << "eval_batches = 2\ncheckpoint_interval = 0\n";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static fs::path write_sweep(const std::string& name, const std::string& text) {
    const auto path = *dir_ / name;
    std::ofstream(path) << text;
    return path;
  }
  static fs::path* dir_;
};
fs::path* Sweeps::dir_ = nullptr;

TEST_F(Sweeps, ASweepFileIsCheckedKeyByKey) {
  const std::string variants = "[[variant]]\nname = \"plain\"\n";
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"[sweep]\nbase = \"base.toml\"\nseeds = [1]\nsteps = 2\nsteps_ = 3\n" + variants,
            "unknown key 'steps_' in [sweep]"},
           {"[sweep]\nbase = \"base.toml\"\nseeds = [1]\nsteps = 2\ntokens = 64\n" + variants,
            "exactly one budget: steps, tokens or flops"},
           {"[sweep]\nbase = \"base.toml\"\nseeds = [1, 2]\ndata_seeds = [5]\nsteps = 2\n" + variants,
            "data_seeds has 1 entries and seeds 2"},
           {"[sweep]\nbase = \"base.toml\"\nseeds = [1]\nsteps = 2\n" + variants + variants,
            "two variants are named 'plain'"},
           {"[sweep]\nbase = \"base.toml\"\nseeds = [1]\nsteps = 2\nbaseline = \"wide\"\n" + variants,
            "baseline 'wide' is not a variant"},
           {"[sweep]\nbase = \"base.toml\"\nseeds = []\nsteps = 2\n" + variants, "seeds must list at least one"}}) {
    const auto path = write_sweep("bad.toml", text);
    const std::string error = testing::input_error_of([&] { load_sweep(path); });
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
}

// Iso-data: twice the batch, half the steps. Iso-compute: steps = FLOPs / (tokens per step x 3 x the model's forward
// FLOPs per token), so the wider model gets fewer steps; the budget here buys 10 steps of the plain model.
TEST_F(Sweeps, TokenAndFlopBudgetsGiveEachVariantItsSteps) {
  const Config plain = load_config((*dir_ / "base.toml").string());
  Config wide = plain;
  apply_override(wide, "model.d_model=64");
  auto training_flops = [](const Config& config) {
    return 3 * build_language_model(config.model, ByteTokenizer().vocab_size())
                   ->forward_flops_per_token(config.data.seq_len);
  };
  const double plain_step_flops = 4 * 16 * training_flops(plain);
  const double wide_step_flops = 4 * 16 * training_flops(wide);
  ASSERT_GT(wide_step_flops, 2 * plain_step_flops);
  const std::string variants =
      "[[variant]]\nname = \"plain\"\n[[variant]]\nname = \"wide\"\nset = [\"model.d_model=64\"]\n"
      "[[variant]]\nname = \"big_batch\"\nset = [\"train.batch_size=8\"]\n";

  const auto by_flops = plan_sweep(
      load_sweep(write_sweep("flops.toml", fmt::format("[sweep]\nbase = \"base.toml\"\nseeds = [1, 2]\nflops = {}\n",
                                                       10.5 * plain_step_flops) +
                                               variants)),
      training_flops);
  ASSERT_EQ(by_flops.size(), 6u);
  EXPECT_EQ(by_flops[0].steps, 10);
  EXPECT_EQ(by_flops[2].steps, static_cast<int64_t>(10.5 * plain_step_flops / wide_step_flops));
  EXPECT_EQ(by_flops[4].steps, 5);  // twice the tokens per step at the same cost per token
  EXPECT_EQ(by_flops[3].run_dir, fs::path("runs") / "sweeps" / "flops" / "wide" / "seed-1");
  EXPECT_EQ(by_flops[3].overrides, (std::vector<std::string>{"model.d_model=64", "run.seed=2", "data.seed=2",
                                                             "train.steps=" + std::to_string(by_flops[3].steps)}));

  const auto by_tokens = plan_sweep(
      load_sweep(write_sweep("tokens.toml", "[sweep]\nbase = \"base.toml\"\nseeds = [1]\ntokens = 640\n" + variants)),
      training_flops);
  EXPECT_EQ(by_tokens[0].steps, 10);
  EXPECT_EQ(by_tokens[1].steps, 10);
  EXPECT_EQ(by_tokens[2].steps, 5);
}

// Runs train seed by seed across the variants, so a sweep stopped early holds whole seeds.
TEST_F(Sweeps, RunsTrainSeedBySeed) {
  const auto runs = plan_sweep(load_sweep(write_sweep("order.toml",
                                                      "[sweep]\nbase = \"base.toml\"\nseeds = [1, 2, 3]\n"
                                                      "steps = 2\n[[variant]]\nname = \"a\"\n"
                                                      "[[variant]]\nname = \"b\"\n")),
                               [](const Config&) { return 1.0; });
  std::vector<std::string> order;
  for (const SweepRun* run : training_order(runs)) order.push_back(fmt::format("{}{}", run->variant, run->seed_index));
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "b0", "a1", "b1", "a2", "b2"}));
}

// Every sweep in configs/sweeps loads and plans: its base and every variant's overrides are valid configs.
TEST(SweepExamples, EverySweepInConfigsPlans) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(testing::source_dir() / "configs" / "sweeps")) {
    SCOPED_TRACE(entry.path().filename().string());
    const SweepSpec spec = load_sweep(entry.path());
    const auto runs = plan_sweep(spec, [](const Config&) { return 1.0; });
    EXPECT_EQ(runs.size(), spec.variants.size() * spec.seeds.size());
    ++count;
  }
  EXPECT_GT(count, 0);
}

// 2 variants x 2 seeds through the CLI; then one run is lost and the sweep rerun: the three finished runs are kept
// (not retrained), the lost one is trained again to the same numbers, and the report covers all four.
TEST_F(Sweeps, ARerunSweepKeepsFinishedRunsAndReports) {
  const auto out = *dir_ / "out";
  const auto path = write_sweep(
      "pair.toml",
      "[sweep]\nbase = \"base.toml\"\nout = \"" + out.string() +
          "\"\nseeds = [1, 2]\ndata_seeds = [7, 8]\nsteps = 3\nmetrics = [\"val/loss\", \"train/loss\"]\n"
          "set = [\"optim.weight_decay=0.05\"]\n"
          "[[variant]]\nname = \"plain\"\n[[variant]]\nname = \"lr_high\"\nset = [\"optim.learning_rate=1e-2\"]\n");
  const auto first = testing::run_cli({"sweep", path.string(), "--jobs", "2"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(fs::exists(out / "report.png"));
  const auto report = nlohmann::json::parse(std::ifstream(out / "report.json"));
  const auto& variants = report["metrics"]["val/loss"]["variants"];
  ASSERT_EQ(variants.size(), 2u);
  EXPECT_EQ(variants[0]["variant"], "plain");
  ASSERT_EQ(variants[0]["values"].size(), 2u);
  EXPECT_NE(variants[0]["values"][0], variants[0]["values"][1]);  // seeds differ
  EXPECT_TRUE(variants[1].contains("versus_baseline"));
  EXPECT_NEAR(variants[1]["versus_baseline"]["mean_difference"].get<double>(),
              (variants[1]["values"][0].get<double>() - variants[0]["values"][0].get<double>() +
               variants[1]["values"][1].get<double>() - variants[0]["values"][1].get<double>()) /
                  2,
              1e-12);
  const Config second = load_config((out / "lr_high" / "seed-1" / "config.toml").string());
  EXPECT_EQ(second.data.seed, 8);
  EXPECT_EQ(second.run.seed, 2);
  EXPECT_EQ(second.optim.weight_decay, 0.05);
  EXPECT_EQ(second.optim.learning_rate, 1e-2);

  const double lost_value = variants[1]["values"][0];
  fs::remove_all(out / "lr_high" / "seed-0");
  const auto again = testing::run_cli({"sweep", path.string()});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("plain/seed-0 finished (step 3), kept"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("lr_high/seed-1 finished (step 3), kept"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("lr_high/seed-0: training 3 steps"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("plain/seed-0: training"), std::string::npos) << again.output;
  const auto rerun = nlohmann::json::parse(std::ifstream(out / "report.json"));
  EXPECT_EQ(rerun["metrics"]["val/loss"]["variants"][1]["values"][0].get<double>(), lost_value);
  EXPECT_EQ(rerun["metrics"]["val/loss"], report["metrics"]["val/loss"]);
}

}  // namespace
}  // namespace inkstone
