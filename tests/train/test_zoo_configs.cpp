// Acceptance of the backbone zoo: every configs/zoo/*.toml, shrunk to a tiny width, trains 50 steps under AR
// (causal mask, no time input) and under uniform diffusion (bidirectional mask, time conditioning) with a
// decreasing loss; a config with MoE layers logs its balance loss and expert load.
#include <algorithm>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "tests/zoo_fixtures.h"
#include "tools/run_setup.h"
#include "train/session.h"
#include "train/window_source.h"

namespace inkstone {
namespace {

// The config's architecture at width 48 and context 32, 50 steps of 8 windows of the tiny word corpus.
std::vector<std::string> tiny_overrides(const Config& config, const std::filesystem::path& data,
                                        const std::filesystem::path& run_dir) {
  std::vector<std::string> overrides = testing::tiny_zoo_model_overrides(config);
  const std::vector<std::string> run = {
      "data.path=\"" + data.string() + "\"", "run.run_dir=\"" + run_dir.string() + "\"", "train.steps=50",
      "train.batch_size=8", "train.grad_accum=1", "train.log_interval=10", "train.eval_interval=0",
      "train.eval_batches=1", "train.checkpoint_interval=0", "optim.learning_rate=3e-3", "schedule.warmup_steps=5"};
  overrides.insert(overrides.end(), run.begin(), run.end());
  return overrides;
}

double mean(const std::vector<double>& v, size_t first, size_t count) {
  return std::accumulate(v.begin() + first, v.begin() + first + count, 0.0) / count;
}

class ZooConfigs : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    corpus_ = new std::filesystem::path(testing::temp_dir("zoo_configs"));
    testing::prepare_word_corpus(*corpus_);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*corpus_);
    delete corpus_;
  }
  static std::filesystem::path* corpus_;

  // Trains the shrunk config under `objective` and returns every step's loss.
  std::vector<double> train(const std::string& objective, std::vector<std::string> extra) {
    const auto path = testing::zoo_config_path(GetParam());
    const auto run_dir = *corpus_ / (GetParam() + "_" + objective);
    auto overrides = tiny_overrides(load_config(path.string()), *corpus_ / "data", run_dir);
    overrides.push_back("objective.name=\"" + objective + "\"");
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    const Config config = load_config(path.string(), overrides);
    auto run = cli::prepare_run(config);
    auto model = cli::build_model_for(config, *run.tokenizer, run.device);
    auto trained = make_objective(config, *run.tokenizer);
    const auto data = cli::open_training_data(config, *run.tokenizer, trained->needs());
    TrainingSession session(config, model, std::move(trained), run.tokenizer, run_dir, run.device);
    WindowSource source(session, data.train, data.sources);
    std::vector<double> losses;
    source.on_step = [&](int64_t, double loss) { losses.push_back(loss); };
    session.run(source);
    return losses;
  }

  std::vector<nlohmann::json> metric_lines(const std::string& objective) {
    std::vector<nlohmann::json> lines;
    std::ifstream in(*corpus_ / (GetParam() + "_" + objective) / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }
};
std::filesystem::path* ZooConfigs::corpus_ = nullptr;

TEST_P(ZooConfigs, TrainsUnderArWithDecreasingLoss) {
  const auto losses = train("ar", {"model.time_conditioning=false"});
  ASSERT_EQ(losses.size(), 50u);
  EXPECT_LT(mean(losses, 40, 10), 0.8 * mean(losses, 0, 10)) << GetParam();
  const Config config = load_config(testing::zoo_config_path(GetParam()).string());
  if (config.model.ffn_pattern.find('M') != std::string::npos) {
    const auto lines = metric_lines("ar");
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(lines.front().contains("moe_balance_loss")) << lines.front().dump();
  }
}

TEST_P(ZooConfigs, TrainsUnderTimeConditionedUniformDiffusionWithDecreasingLoss) {
  const auto losses = train("uniform_diffusion", {"model.time_conditioning=true", "model.tie_embeddings=false"});
  ASSERT_EQ(losses.size(), 50u);
  EXPECT_LT(mean(losses, 40, 10), 0.9 * mean(losses, 0, 10)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooConfigs, ::testing::ValuesIn(testing::zoo_config_names()),
                         [](const auto& info) { return testing::zoo_test_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ZooConfigs);

}  // namespace
}  // namespace inkstone
