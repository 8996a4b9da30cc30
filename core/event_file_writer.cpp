#include "core/event_file_writer.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "core/atomic_file.h"
#include "core/errors.h"

namespace inkstone::tensorboard {
namespace {

constexpr const char* kFileVersion = "brain.Event:2";
constexpr const char* kFilePrefix = "events.out.tfevents.";

}  // namespace

std::optional<std::filesystem::path> find_event_file(const std::filesystem::path& run_dir) {
  std::optional<std::filesystem::path> found;
  if (!std::filesystem::is_directory(run_dir)) return found;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kFilePrefix, 0) != 0 || !entry.is_regular_file()) continue;
    if (found)
      throw InputError("run folder " + run_dir.string() + " has two event files: " + found->string() + " and " +
                       entry.path().string());
    found = entry.path();
  }
  return found;
}

EventFileWriter::EventFileWriter(const std::filesystem::path& run_dir, std::optional<int64_t> resumed_step) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::optional<std::filesystem::path> existing = find_event_file(run_dir);
  if (existing && resumed_step) {
    // Keep the whole records up to the checkpoint's step (the header is step 0), in a file rewritten atomically.
    path_ = *existing;
    std::string kept;
    for (const Event& event : read_event_file(path_))
      if (event.step <= *resumed_step) kept += frame_record(serialize_event(event));
    write_file_atomic(path_, kept);
  } else {
    if (existing) std::filesystem::remove(*existing);  // a fresh run in a reused folder starts a fresh file
    path_ = run_dir /
            (kFilePrefix + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + ".inkstone");
    write_file_atomic(
        path_, frame_record(serialize_event({std::chrono::duration<double>(now).count(), 0, kFileVersion, {}, {}})));
  }
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot open " + path_.string() + " for appending");
}

void EventFileWriter::write(const Event& event) {
  out_ << frame_record(serialize_event(event)) << std::flush;
  if (!out_) throw std::runtime_error("cannot write to " + path_.string());
}

}  // namespace inkstone::tensorboard
