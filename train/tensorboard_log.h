// The run's metrics as a TensorBoard event file in the run folder ([metrics] tensorboard = true), next to
// metrics.jsonl and consistent with it after a kill or a resume: every number of a line as a scalar under its tag
// (train/metric_tags.h), a samples line's samples and the config as text. Rank 0 only, like metrics.jsonl.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/event_file_writer.h"

namespace inkstone {

// TensorBoard's text plugin renders Markdown: shown as a code block, text appears as it was written.
std::string as_markdown_code(const std::string& text);

class TensorBoardLog {
 public:
  // A resumed run (`resumed_step`) keeps the events up to its checkpoint (tensorboard::EventFileWriter).
  explicit TensorBoardLog(const std::filesystem::path& run_dir, std::optional<int64_t> resumed_step = std::nullopt);

  // A metrics line (an object with an integer "step"): its numbers as scalars; a line with "samples" (a list of
  // {prompt, text}) as one text per sample, tagged samples/<i>.
  void append(const nlohmann::json& line);
  void text(int64_t step, const std::string& tag, const std::string& text);

  const std::filesystem::path& path() const { return writer_.path(); }

 private:
  tensorboard::EventFileWriter writer_;
};

}  // namespace inkstone
