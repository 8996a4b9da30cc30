// The run's metrics as JSON lines (RUN_DIR/metrics.jsonl): one object per logged step, readable while the run
// goes on and consistent after a kill or a resume.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

namespace inkstone {

class MetricsLog {
 public:
  // Appends to `path` (created if absent). With `resumed_step`, first drops every line whose "step" is greater
  // (they belong to the abandoned continuation after the checkpoint) and a partial last line left by a kill,
  // rewriting the file atomically; a malformed complete line is an InputError naming file and line.
  explicit MetricsLog(std::filesystem::path path, std::optional<int64_t> resumed_step = std::nullopt);

  // Writes `record` (a JSON object with an integer "step"; values numbers or strings) as one line and flushes
  // it, so a killed run leaves only whole lines. JSON has no NaN or infinity: such numbers are written as the
  // strings "nan", "inf" and "-inf", which keeps the difference between a diverged and an overflowed metric
  // (null would lose it) and still parses everywhere.
  void append(const nlohmann::json& record);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace inkstone
