// Crash-safe file writing: a file either keeps its old contents or has the complete new ones, never a mix.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace inkstone {

// Streams bytes into `<path>.tmp-<pid>` beside the target; commit() fsyncs it, renames it over the target
// and fsyncs the folder so the rename itself survives a power loss. Destroyed without commit() (an exception,
// an early return) it removes the temporary file and leaves the target untouched.
// Errors are std::runtime_error naming the path and the system's reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();

 private:
  [[noreturn]] void discard_temp_and_fail(const std::string& what, const std::filesystem::path& path);

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
};

// The whole of `contents` into `path`, atomically (see AtomicFile).
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// fsync a file or a folder by path: a folder must be synced for a rename or a new entry in it to be durable.
void fsync_path(const std::filesystem::path& path);

}  // namespace inkstone
