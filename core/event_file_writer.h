// A run's TensorBoard event file (docs/observability.md, "Event files"): created with its header, cut back to a
// checkpoint's step on resume, appended to.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/tensorboard/event_file.h"

namespace inkstone::tensorboard {

// Appends events to RUN_DIR/events.out.tfevents.<start time>.inkstone, one file per run: a new run creates it
// with the header event; a resumed one (`resumed_step`) finds it, drops the records of steps after the
// checkpoint and a partial last record, rewriting the file atomically, and appends after them. Every event is
// flushed when written, so a killed run leaves whole records only (and at most one partial one).
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::filesystem::path& run_dir, std::optional<int64_t> resumed_step = std::nullopt);
  void write(const Event& event);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// The run's event file, if it has one.
std::optional<std::filesystem::path> find_event_file(const std::filesystem::path& run_dir);

}  // namespace inkstone::tensorboard
