// One writer per run folder (docs/reliability.md): an exclusive flock on RUN/.lock, held for the life of the
// process. The kernel releases it when the process ends however it ends, so a killed run leaves nothing to clean.
#pragma once

#include <filesystem>

namespace inkstone {

class RunLock {
 public:
  // Creates the folder if needed and takes the lock; an InputError naming the holder (pid, host, start time)
  // when another process has it.
  explicit RunLock(const std::filesystem::path& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace inkstone
