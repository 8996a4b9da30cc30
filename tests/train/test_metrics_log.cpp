// Metrics log: one parseable JSON object per line, non-finite numbers as strings, truncation on resume.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/errors.h"
#include "tests/test_paths.h"
#include "train/metrics_log.h"

namespace inkstone {
namespace {

std::vector<nlohmann::json> read_records(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(MetricsLog, WritesOneParseableObjectPerLine) {
  const auto path = testing::temp_dir("metrics_lines") / "metrics.jsonl";
  {
    MetricsLog log(path);
    log.append({{"step", 1}, {"loss_nats", 2.5}, {"phase", "train"}});
    log.append({{"step", 2}, {"loss_nats", std::nan("")}, {"grad_norm", HUGE_VAL}, {"lr", -HUGE_VAL}});
    // Flushed per line: a reader sees both lines while the log is still open.
    const auto records = read_records(path);
    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(records[0], nlohmann::json({{"step", 1}, {"loss_nats", 2.5}, {"phase", "train"}}));
    EXPECT_EQ(records[1], nlohmann::json({{"step", 2}, {"loss_nats", "nan"}, {"grad_norm", "inf"}, {"lr", "-inf"}}));
  }
  MetricsLog reopened(path);
  reopened.append({{"step", 3}});
  EXPECT_EQ(read_records(path).size(), 3u);
  EXPECT_THROW(reopened.append({{"loss", 1.0}}), std::invalid_argument);
}

TEST(MetricsLog, ResumeDropsLaterStepsAndAPartialLine) {
  const auto path = testing::temp_dir("metrics_resume") / "metrics.jsonl";
  {
    MetricsLog log(path);
    for (int step = 1; step <= 5; ++step) log.append({{"step", step}, {"loss", 1.0 / step}});
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"lo";  // killed mid-line
  {
    MetricsLog resumed(path, 3);
    resumed.append({{"step", 4}, {"loss", 0.0}});
  }
  const auto records = read_records(path);
  ASSERT_EQ(records.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(records[i]["step"], i + 1);
  EXPECT_EQ(records[3]["loss"], 0.0);
}

TEST(MetricsLog, MalformedLineOnResumeIsAnInputError) {
  const auto path = testing::temp_dir("metrics_bad") / "metrics.jsonl";
  std::ofstream(path) << "{\"step\": 1}\nnot json\n";
  try {
    MetricsLog log(path, 1);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ":2:"), std::string::npos) << e.what();
  }
}

TEST(MetricsLog, ResumeWithoutALogStartsOne) {
  const auto path = testing::temp_dir("metrics_fresh") / "metrics.jsonl";
  MetricsLog log(path, 10);
  log.append({{"step", 11}});
  EXPECT_EQ(read_records(path).size(), 1u);
}

}  // namespace
}  // namespace inkstone
