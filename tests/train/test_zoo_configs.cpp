// Acceptance of the backbone zoo: every configs/zoo/*.toml, shrunk to a tiny width, trains 50 steps under AR
// (causal mask, no time input) and under uniform diffusion (bidirectional mask, time conditioning) with a
// decreasing loss; a config with MoE layers logs its balance loss and expert load.
#include <algorithm>
#include <fstream>
#include <numeric>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/config_schema.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "tools/run_setup.h"
#include "train/session.h"
#include "train/window_source.h"

namespace inkstone {
namespace {

std::vector<std::string> zoo_config_names() {
  std::vector<std::string> names;
  const auto dir = testing::source_dir() / "configs" / "zoo";
  if (std::filesystem::is_directory(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool schema_has(const std::string& section, const std::string& key) {
  const auto& schema = config_schema();
  return std::any_of(schema.begin(), schema.end(), [&](const FieldSpec& f) {
    return f.section == section && f.key == key;
  });
}

// The config's architecture at width 48 and context 32, 50 steps of 8 windows of the tiny word corpus. Keys a
// variant does not have are left alone.
std::vector<std::string> tiny_overrides(const Config& config, const std::filesystem::path& data,
                                        const std::filesystem::path& run_dir) {
  std::vector<std::string> overrides = {
      "model.d_model=48", "model.n_heads=4", "model.n_kv_heads=2", "model.head_dim=0", "model.ffn_dim=0",
      "model.max_seq_len=32", "model.cond_dim=16", "data.seq_len=32", "data.path=\"" + data.string() + "\"",
      "run.run_dir=\"" + run_dir.string() + "\"", "train.steps=50", "train.batch_size=8", "train.grad_accum=1",
      "train.log_interval=10", "train.eval_interval=0", "train.eval_batches=1", "train.checkpoint_interval=0",
      "optim.learning_rate=3e-3", "schedule.warmup_steps=5"};
  if (config.model.moe_expert_ffn_dim > 0) overrides.push_back("model.moe_expert_ffn_dim=32");
  if (schema_has("model", "width_quantum")) overrides.push_back("model.width_quantum=8");
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
    const auto path = testing::source_dir() / "configs" / "zoo" / (GetParam() + ".toml");
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
    WindowSource source(session, data.train, data.val);
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
  const Config config = load_config((testing::source_dir() / "configs" / "zoo" / (GetParam() + ".toml")).string());
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

INSTANTIATE_TEST_SUITE_P(Zoo, ZooConfigs, ::testing::ValuesIn(zoo_config_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ZooConfigs);

}  // namespace
}  // namespace inkstone
