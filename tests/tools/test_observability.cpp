// What a run shows (docs/observability.md), end to end through the CLI: the TensorBoard event file agrees with
// metrics.jsonl and is read back by TensorBoard's own reader; samples appear every K steps and a resumed run
// samples and logs exactly as the uninterrupted one; mfu against a configured peak; `inkstone plot`.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/event_file_writer.h"
#include "tests/cli_run.h"
#include "tests/fixtures.h"
#include "train/tensorboard_log.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;

std::vector<nlohmann::json> metrics_lines(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// tag -> step -> value of the run's event file; texts likewise.
struct EventView {
  std::map<std::string, std::map<int64_t, float>> scalars;
  std::map<std::string, std::map<int64_t, std::string>> texts;
  std::map<std::string, int> scalar_writes;  // how often each (tag, step) was written, summed per tag
};

EventView read_events(const fs::path& run) {
  const auto file = tensorboard::find_event_file(run);
  EXPECT_TRUE(file.has_value()) << run;
  EventView view;
  if (!file) return view;
  for (const auto& event : tensorboard::read_event_file(*file)) {
    for (const auto& [tag, value] : event.scalars) {
      view.scalars[tag][event.step] = value;
      ++view.scalar_writes[tag];
    }
    for (const auto& [tag, text] : event.texts) view.texts[tag][event.step] = text;
  }
  return view;
}

class ObservedRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::temp_dir("observed_run"));
    const auto data = testing::prepare_word_corpus(*dir_);
    config_ = new fs::path(*dir_ / "observed.toml");
    std::ofstream(*config_) << "[run]\nthreads = 1\ndevice = \"cpu\"\n"
                            << "[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\nmax_seq_len = 32\n"
                            << "[data]\npath = \"" << data.string() << "\"\nseq_len = 16\n"
                            << "[train]\nsteps = 6\nbatch_size = 4\nlog_interval = 1\neval_interval = 3\n"
                            << "eval_batches = 1\ncheckpoint_interval = 3\n"
                            << "[sample]\nmax_new_tokens = 6\n"
                            << "[metrics]\ntensorboard = true\nsample_interval = 2\n"
                            << "sample_prompts = [\"the cat\", \"a mat\"]\npeak_tflops = 0.001\n";
    straight_output_ =
        new std::string(run_cli({"train", config_->string(), "--run-dir", (*dir_ / "straight").string()}).output);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete config_;
    delete straight_output_;
  }
  static fs::path* dir_;
  static fs::path* config_;
  static std::string* straight_output_;
};
fs::path* ObservedRun::dir_ = nullptr;
fs::path* ObservedRun::config_ = nullptr;
std::string* ObservedRun::straight_output_ = nullptr;

TEST_F(ObservedRun, EventFileHoldsEveryLoggedNumberAndSamplesComeEveryKSteps) {
  const fs::path run = *dir_ / "straight";
  ASSERT_TRUE(fs::exists(run / "checkpoints" / "step_000006")) << *straight_output_;
  const EventView events = read_events(run);
  std::vector<int64_t> sample_steps;
  int train_lines = 0;
  for (const auto& line : metrics_lines(run)) {
    const int64_t step = line["step"];
    if (line["split"] == "train") {
      ++train_lines;
      EXPECT_EQ(events.scalars.at("train/loss").at(step), static_cast<float>(line["loss"].get<double>()));
      EXPECT_EQ(events.scalars.at("system/peak_rss_mib").at(step),
                static_cast<float>(line["peak_rss_mib"].get<double>()));
      // mfu is the achieved TFLOP/s per device over the configured peak (0.001 TFLOP/s)
      EXPECT_NEAR(line["mfu"].get<double>(), line["tflops_per_s"].get<double>() / 0.001, 1e-9);
      EXPECT_GT(line["tflops_per_s"].get<double>(), 0);
    } else if (line["split"] == "val") {
      EXPECT_EQ(events.scalars.at("val/loss").at(step), static_cast<float>(line["loss"].get<double>()));
    } else if (line["split"] == "samples") {
      sample_steps.push_back(step);
      ASSERT_EQ(line["samples"].size(), 2u);
      EXPECT_EQ(line["samples"][0]["prompt"], "the cat");
      EXPECT_EQ(line["samples"][1]["prompt"], "a mat");
      for (size_t i = 0; i < 2; ++i)
        EXPECT_EQ(events.texts.at("samples/" + std::to_string(i)).at(step),
                  as_markdown_code(line["samples"][i]["prompt"].get<std::string>() +
                                   line["samples"][i]["text"].get<std::string>()));
    }
  }
  EXPECT_EQ(train_lines, 6);
  EXPECT_EQ(sample_steps, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_NE(events.texts.at("config").at(0).find("    tensorboard = true"), std::string::npos);
}

// A run killed after logging step 5 but checkpointed at 3 (the record of step 5 and a half-written one are planted
// in its event file) resumes to 6: its losses, samples and event file are those of the uninterrupted run.
TEST_F(ObservedRun, AResumedRunLogsAndSamplesAsTheUninterruptedOne) {
  const fs::path run = *dir_ / "resumed";
  ASSERT_EQ(run_cli({"train", config_->string(), "--run-dir", run.string(), "--set", "train.steps=3"}).exit_code, 0);
  {
    const auto file = *tensorboard::find_event_file(run);
    std::ofstream out(file, std::ios::binary | std::ios::app);
    out << tensorboard::frame_record(tensorboard::serialize_event({0, 5, "", {{"train/loss", 99.0f}}, {}}));
    out << tensorboard::frame_record(tensorboard::serialize_event({0, 6, "", {{"train/loss", 98.0f}}, {}}))
               .substr(0, 9);
  }
  const auto resumed = run_cli({"train", config_->string(), "--run-dir", run.string(), "--resume"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;

  const EventView straight = read_events(*dir_ / "straight"), continued = read_events(run);
  EXPECT_EQ(continued.scalars.at("train/loss"), straight.scalars.at("train/loss"));
  EXPECT_EQ(continued.scalar_writes.at("train/loss"), 6);  // steps 1-6 once each
  EXPECT_EQ(continued.texts.at("samples/0"), straight.texts.at("samples/0"));
  EXPECT_EQ(continued.texts.at("samples/1"), straight.texts.at("samples/1"));
  EXPECT_EQ(continued.texts.at("config").size(), 1u);
}

// TensorBoard's own reader (the tensorboard package in .venv, `make setup-python`) sees the same tags, steps,
// values and texts as inkstone's reader.
TEST_F(ObservedRun, TensorBoardReadsTheEventFile) {
  const auto python = testing::source_dir() / ".venv" / "bin" / "python";
  if (!fs::exists(python) || testing::run_command({python.string(), "-c", "import tensorboard"}).exit_code != 0)
    GTEST_SKIP() << "no .venv with tensorboard (make setup-python)";
  const fs::path run = *dir_ / "straight";
  const auto read = testing::run_command(
      {python.string(), (testing::source_dir() / "tests" / "tools" / "check_with_tensorboard.py").string(),
       run.string()});
  ASSERT_EQ(read.exit_code, 0) << read.output;
  const auto found = nlohmann::json::parse(read.output.substr(read.output.find('{')));
  const EventView events = read_events(run);
  ASSERT_EQ(found["scalars"].size(), events.scalars.size());
  for (const auto& [tag, by_step] : events.scalars) {
    ASSERT_TRUE(found["scalars"].contains(tag)) << tag;
    std::map<int64_t, float> theirs;
    for (const auto& point : found["scalars"][tag]) theirs[point[0].get<int64_t>()] = point[1].get<float>();
    EXPECT_EQ(theirs, by_step) << tag;
  }
  for (const std::string tag : {"config", "samples/0", "samples/1"}) {
    EXPECT_EQ(found["plugins"][tag], "text") << tag;
    std::map<int64_t, std::string> theirs;
    for (const auto& point : found["texts"][tag]) theirs[point[0].get<int64_t>()] = point[1].get<std::string>();
    EXPECT_EQ(theirs, events.texts.at(tag)) << tag;
  }
}

TEST_F(ObservedRun, PlotDrawsTheRunsAndRefusesBadRequests) {
  const std::string straight = (*dir_ / "straight").string();
  const std::string figure = (*dir_ / "loss.png").string();
  const auto drawn = run_cli({"plot", straight, straight, "--metric", "train/loss", "--metric", "val/loss", "--metric",
                              "system/mfu", "--x", "tokens", "--smooth", "0.5", "--out", figure});
  EXPECT_EQ(drawn.exit_code, 0) << drawn.output;
  EXPECT_NE(drawn.output.find("3 panels, 6 curves, 1200x394"), std::string::npos) << drawn.output;
  EXPECT_TRUE(fs::exists(figure));

  const auto missing = run_cli(
      {"plot", straight, "--metric", "train/loss", "--metric", "eval/pass@1", "--out", (*dir_ / "f.svg").string()});
  EXPECT_EQ(missing.exit_code, 0) << missing.output;
  EXPECT_NE(missing.output.find("no run logged 'eval/pass@1'; left out"), std::string::npos) << missing.output;

  const auto listed = run_cli({"plot", straight, "--list"});
  EXPECT_NE(listed.output.find("  train/loss\n"), std::string::npos) << listed.output;
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"plot", straight, "--metric", "train/loss", "--out", (*dir_ / "f.jpg").string()}, "as .png or .svg"},
           {{"plot", straight, "--metric", "no/such", "--out", figure}, "none of the metrics is in these runs"},
           {{"plot", straight, "--out", figure}, "--metric TAG (repeatable) or --rl"}}) {
    const auto refused = run_cli(args);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find(message), std::string::npos) << refused.output;
  }
}

// The RL panel from a hand-made RL run: the largest pass@k found, flow gaps per side, and a metric no run logged
// (KL: no reference in these runs) left out.
TEST(PlotRl, TheRlPanelDrawsWhatTheRunsLogged) {
  const auto dir = testing::temp_dir("plot_rl");
  for (const std::string run : {"gflowrl", "grpo"}) {
    fs::create_directories(dir / run);
    std::ofstream out(dir / run / "metrics.jsonl");
    for (int step = 1; step <= 3; ++step) {
      nlohmann::json line = {{"step", step},           {"split", "train"},      {"reward_mean", 0.1 * step},
                             {"accuracy", 0.1 * step}, {"entropy", 1.0 / step}, {"response_length_mean", 20 + step}};
      if (run == "gflowrl") {
        line["saturated_push_up"] = 0.01 * step;
        line["saturated_push_down"] = 0.02 * step;
      }
      out << line.dump() << "\n";
      out << nlohmann::json{{"step", step}, {"split", "eval"}, {"pass@1", 0.2 * step}, {"pass@8", 0.3 * step}}.dump()
          << "\n";
    }
  }
  const auto drawn = run_cli(
      {"plot", (dir / "gflowrl").string(), (dir / "grpo").string(), "--rl", "--out", (dir / "rl.svg").string()});
  EXPECT_EQ(drawn.exit_code, 0) << drawn.output;
  // reward, accuracy, pass@1, pass@8, entropy, push up, push down, length: 8 panels, 2 + 2 + 2 + 2 + 2 + 1 + 1 + 2
  EXPECT_NE(drawn.output.find("8 panels, 14 curves"), std::string::npos) << drawn.output;
  EXPECT_NE(drawn.output.find("no run logged 'train/kl_old_ref_k3'"), std::string::npos) << drawn.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace inkstone
