// Paths the tests need: the source tree, the built CLI, and the optional shared data folder beside the repo.
#pragma once
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>
#include <unistd.h>

#include "inkstone_test_locations.h"

namespace inkstone::testing {

inline std::filesystem::path source_dir() { return INKSTONE_SOURCE_DIR; }
inline std::filesystem::path cli_binary() { return INKSTONE_BINARY; }

// The shared data sets sit beside the repository when present; tests that need them skip otherwise.
inline std::filesystem::path shared_data_dir() { return source_dir().parent_path() / "shared" / "data"; }

// The folders temp_dir made, removed when the test process exits normally (a crashed test leaves its folders for
// inspection).
class TempDirs {
 public:
  ~TempDirs() {
    std::error_code ignored;
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }
  void add(const std::filesystem::path& dir) { dirs_.push_back(dir); }

 private:
  std::vector<std::filesystem::path> dirs_;
};

// A fresh, empty temporary folder for one test.
inline std::filesystem::path temp_dir(const std::string& name) {
  static TempDirs made;
  auto dir = std::filesystem::temp_directory_path() / ("inkstone_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir;
}

}  // namespace inkstone::testing
