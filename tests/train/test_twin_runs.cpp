// Counterfactual twins (docs/sweeps.md, "Twin runs"): two runs identical but for one injected row at one update
// are bitwise equal before it and differ from it on; the watched text is scored in both; the refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/cli_run.h"
#include "tests/fixtures.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

std::vector<nlohmann::json> metric_lines(const fs::path& run, const std::string& split) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("split", "") == split) lines.push_back(j);
  }
  return lines;
}

struct Twins {
  fs::path dir, config, control, injected;
};

Twins train_twins(const std::string& objective) {
  Twins t;
  t.dir = testing::temp_dir("twin_" + objective);
  const auto data = testing::prepare_word_corpus(t.dir);
  t.config = t.dir / "tiny.toml";
  std::ofstream(t.config) << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                          << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
                          << "[objective]\nname = \"" << objective << "\"\n"
                          << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                          << "[metrics]\nwatch_text = \"a zebra quartz\"\n"
                          << "[train]\nsteps = 6\nbatch_size = 4\nlog_interval = 1\neval_interval = 2\n"
                          << "eval_batches = 1\ncheckpoint_interval = 1\nkeep_checkpoints = 10\n";
  t.control = t.dir / "control";
  t.injected = t.dir / "injected";
  EXPECT_EQ(run_cli({"train", t.config.string(), "--run-dir", t.control.string()}).exit_code, 0);
  const auto injected =
      run_cli({"train", t.config.string(), "--run-dir", t.injected.string(), "--set",
               "data.inject_text=\"a zebra quartz\"", "--set", "data.inject_step=4", "--set", "data.inject_row=2"});
  EXPECT_EQ(injected.exit_code, 0) << injected.output;
  return t;
}

double distance(const fs::path& a, const fs::path& b, int64_t* differing) {
  const auto out = run_cli({"checkpoint", "distance", a.string(), b.string(), "--format", "json"});
  EXPECT_EQ(out.exit_code, 0) << out.output;
  const auto j = nlohmann::json::parse(out.output);
  *differing = j.at("differing_tensors").get<int64_t>();
  return j.at("distance").get<double>();
}

void expect_twins_split_at_the_injection(const std::string& objective) {
  const auto t = train_twins(objective);
  const auto control = metric_lines(t.control, "train"), injected = metric_lines(t.injected, "train");
  ASSERT_EQ(control.size(), 6u);
  ASSERT_EQ(injected.size(), 6u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(control[i].at("loss"), injected[i].at("loss")) << "step " << i + 1;
  EXPECT_NE(control[3].at("loss"), injected[3].at("loss"));

  int64_t differing = -1;
  EXPECT_EQ(distance(t.control / "checkpoints" / "step_000003", t.injected / "checkpoints" / "step_000003", &differing),
            0.0);
  EXPECT_EQ(differing, 0);
  EXPECT_GT(distance(t.control / "checkpoints" / "step_000004", t.injected / "checkpoints" / "step_000004", &differing),
            0.0);
  EXPECT_GT(differing, 0);

  // The watched text at steps 2, 4, 6: the same before the injection, apart from it on.
  const auto control_val = metric_lines(t.control, "val"), injected_val = metric_lines(t.injected, "val");
  ASSERT_EQ(control_val.size(), 3u);
  ASSERT_EQ(injected_val.size(), 3u);
  EXPECT_GT(control_val[0].at("watch_loss_nats").get<double>(), 0.0);
  EXPECT_EQ(control_val[0].at("watch_loss_nats"), injected_val[0].at("watch_loss_nats"));
  EXPECT_NE(control_val[1].at("watch_loss_nats"), injected_val[1].at("watch_loss_nats"));
}

TEST(TwinRuns, AutoregressiveTwinsAreBitwiseEqualUntilTheInjectedRow) { expect_twins_split_at_the_injection("ar"); }

TEST(TwinRuns, DiffusionTwinsAreBitwiseEqualUntilTheInjectedRow) {
  expect_twins_split_at_the_injection("uniform_diffusion");
}

TEST(TwinRuns, RefusesInjectionsItCannotMake) {
  const auto dir = testing::temp_dir("twin_refusals");
  const auto data = testing::prepare_word_corpus(dir);
  const auto config = dir / "tiny.toml";
  std::ofstream(config) << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                        << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
                        << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                        << "[train]\nsteps = 4\nbatch_size = 4\n";
  const auto refuse = [&](std::vector<std::string> sets, const std::string& message) {
    std::vector<std::string> args = {"train", config.string(), "--run-dir", (dir / "run").string()};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  };
  refuse({"data.inject_text=\"x\"", "data.inject_step=9"}, "data.inject_step = 9 is after the last step");
  refuse({"data.inject_text=\"x\""}, "data.inject_text and data.inject_step go together");
  refuse({"data.inject_text=\"x\"", "data.inject_step=2", "data.inject_row=4"},
         "data.inject_row = 4 is outside a batch of train.batch_size = 4 rows");
  refuse({"data.inject_text=\"" + std::string(40, 'x') + "\"", "data.inject_step=2"},
         "data.inject_text is 40 tokens, longer than a training window of 17");
  refuse({"objective.name=\"grpo\"", "data.inject_text=\"x\"", "data.inject_step=2"},
         "data.inject_step and metrics.watch_text apply to objectives that train on token windows");
}

}  // namespace
}  // namespace inkstone
