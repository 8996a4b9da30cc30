// What `inkstone plot` reads and draws (viz/): series by tag against steps, tokens and time, smoothing, ticks,
// and a drawn figure's size and curve count.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/errors.h"
#include "tests/fixtures.h"
#include "tests/test_paths.h"
#include "viz/figure.h"
#include "viz/interval_chart.h"
#include "viz/line_chart.h"
#include "viz/run_series.h"

namespace inkstone {
namespace {

namespace fs = std::filesystem;

fs::path write_run(const std::string& name, const std::string& lines) {
  const auto dir = testing::temp_dir("viz_" + name) / name;
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << lines;
  return dir;
}

const char* kLines = R"({"step":1,"split":"train","loss":4.0,"tokens_seen":100,"elapsed_s":0.5,"tokens_per_s":200})"
                     "\n"
                     R"({"step":2,"split":"train","loss":"nan","tokens_seen":200,"elapsed_s":1.0,"tokens_per_s":200})"
                     "\n"
                     R"({"step":2,"split":"val","loss":3.5,"elapsed_s":1.2})"
                     "\n"
                     R"({"step":3,"split":"train","loss":3.0,"tokens_seen":300,"elapsed_s":1.5,"precision":"fp32"})"
                     "\n"
                     R"({"step":3,"event":"skipped_spike","loss_z":7.5})"
                     "\n";

TEST(RunSeries, TagsSplitTheLinesAndSkipNonFiniteValues) {
  const auto run = write_run("tags", kLines);
  EXPECT_EQ(run_tags(run), (std::vector<std::string>{"skipped_spike/loss_z", "system/elapsed_s", "system/tokens_per_s",
                                                     "train/loss", "train/tokens_seen", "val/loss"}));
  const auto series = read_run_series(run, {"train/loss", "val/loss", "absent/tag"}, XAxis::steps);
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].run, "tags");
  EXPECT_EQ(series[0].x, (std::vector<double>{1, 3}));  // step 2's nan left out
  EXPECT_EQ(series[0].y, (std::vector<double>{4.0, 3.0}));
  EXPECT_EQ(series[1].x, (std::vector<double>{2}));
}

TEST(RunSeries, TokensComeFromTheTrainLineOfTheStepAndTimeFromElapsed) {
  const auto run = write_run("tokens", kLines);
  const auto by_tokens = read_run_series(run, {"val/loss", "train/loss"}, XAxis::tokens);
  EXPECT_EQ(by_tokens[0].x, (std::vector<double>{200}));
  EXPECT_EQ(by_tokens[1].x, (std::vector<double>{100, 300}));
  const auto by_time = read_run_series(run, {"val/loss"}, XAxis::time);
  EXPECT_EQ(by_time[0].x, (std::vector<double>{1.2}));

  const auto rl = write_run("rl", R"({"step":1,"split":"train","reward_mean":0.5})"
                                  "\n");
  EXPECT_NE(testing::input_error_of([&] {
              read_run_series(rl, {"train/reward_mean"}, XAxis::tokens);
            }).find("no tokens_seen"),
            std::string::npos);
  const auto bad = write_run("bad", "{\"step\":1}\nnot json\n");
  EXPECT_NE(testing::input_error_of([&] { run_tags(bad); }).find("metrics.jsonl:2: not a metrics record"),
            std::string::npos);
}

// TensorBoard's debiased EMA: s_k = (w s_{k-1} + (1 - w) y_k) / (1 - w^k) with s_0 = 0.
TEST(RunSeries, SmoothingIsTheDebiasedMovingAverage) {
  const auto s = smooth({1.0, 3.0, 5.0}, 0.5);
  EXPECT_DOUBLE_EQ(s[0], 1.0);
  EXPECT_DOUBLE_EQ(s[1], (0.25 * 1 + 0.5 * 3) / 0.75);
  EXPECT_DOUBLE_EQ(s[2], (0.125 * 1 + 0.25 * 3 + 0.5 * 5) / 0.875);
  EXPECT_EQ(smooth({2.0, 2.0, 2.0}, 0.9), (std::vector<double>{2.0, 2.0, 2.0}));
  EXPECT_EQ(smooth({1.0, 3.0}, 0.0), (std::vector<double>{1.0, 3.0}));
}

TEST(LineChart, TicksStepOneTwoOrFive) {
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1}));
  EXPECT_EQ(nice_ticks(3, 47, 5), (std::vector<double>{10, 20, 30, 40}));
  EXPECT_EQ(nice_ticks(-5, 5, 4), (std::vector<double>{-5, 0, 5}));
  EXPECT_TRUE(nice_ticks(1, 1, 5).empty());
}

uint32_t big_endian(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

// A PNG's size sits in its IHDR chunk (bytes 16-23, big endian); an SVG states its own.
TEST(LineChart, DrawsPngAndSvgOfTheAskedSize) {
  const auto a = write_run("run_a", kLines);
  const auto b = write_run("run_b", R"({"step":1,"split":"train","loss":5.0})"
                                    "\n"
                                    R"({"step":4,"split":"train","loss":2.0})"
                                    "\n");
  std::vector<ChartPanel> panels = {{"train/loss", {}}, {"val/loss", {}}};
  for (const auto& run : {a, b})
    for (auto& s : read_run_series(run, {"train/loss", "val/loss"}, XAxis::steps))
      (s.tag == "train/loss" ? panels[0] : panels[1]).series.push_back(s);
  ChartStyle style;
  style.width = 800;
  style.smoothing = 0.6;
  const auto png = testing::temp_dir("viz_png") / "fig.png";
  const ChartSummary summary = draw_line_charts(panels, style, png);
  EXPECT_EQ(summary.panels, 2);
  EXPECT_EQ(summary.series, 3);  // two runs' train/loss, one run's val/loss
  std::ifstream in(png, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(1, 3), "PNG");
  EXPECT_EQ(big_endian(bytes, 16), 800u);
  EXPECT_EQ(big_endian(bytes, 20), static_cast<uint32_t>(summary.height));
  EXPECT_EQ(summary.height, 34 + 360);

  const auto svg = testing::temp_dir("viz_svg") / "fig.svg";
  draw_line_charts(panels, style, svg);
  std::ifstream svg_in(svg);
  const std::string svg_text{std::istreambuf_iterator<char>(svg_in), {}};
  EXPECT_NE(svg_text.find("width=\"800pt\" height=\"394pt\""), std::string::npos) << svg_text.substr(0, 300);

  style.log_y = true;
  panels[0].series[0].y[0] = -1;
  EXPECT_NE(testing::input_error_of([&] { draw_line_charts(panels, style, png); }).find("--log-y"), std::string::npos);
  EXPECT_NE(testing::input_error_of([&] {
              draw_line_charts(panels, ChartStyle{}, testing::temp_dir("viz_jpg") / "f.jpg");
            }).find("written as .png or .svg"),
            std::string::npos);
}

// A sweep's figure: one panel per metric, a row per variant, a dot per seed; its height follows the rows.
TEST(IntervalChart, DrawsARowPerVariantAndADotPerSeed) {
  const std::vector<IntervalPanel> panels = {{"val/loss",
                                              {{"plain", {3.5, 3.6, 3.4}, 3.5, 3.25, 3.75, true, false},
                                               {"attnres", {3.3, 3.4, 3.35}, 3.35, 3.23, 3.47, false, true}}},
                                             {"train/loss",
                                              {{"plain", {2.4, 2.5, 2.45}, 2.45, 2.33, 2.57, true, false},
                                               {"attnres", {2.4, 2.3, 2.35}, 2.35, 2.23, 2.47, false, false}}}};
  const auto png = testing::temp_dir("viz_interval") / "report.png";
  const IntervalSummary summary = draw_interval_charts(panels, png, 900);
  EXPECT_EQ(summary.panels, 2);
  EXPECT_EQ(summary.rows, 4);
  EXPECT_EQ(summary.points, 12);
  EXPECT_EQ(summary.height, 2 * (34 + 2 * 40 + 40));
  std::ifstream in(png, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(big_endian(bytes, 16), 900u);
  EXPECT_EQ(big_endian(bytes, 20), static_cast<uint32_t>(summary.height));
}

}  // namespace
}  // namespace inkstone
