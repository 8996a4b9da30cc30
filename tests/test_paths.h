// Paths the tests need: the source tree, the built CLI, and the optional shared data folder beside the repo.
#pragma once
#include <filesystem>
#include <string>
#include <unistd.h>

#include "inkstone_test_locations.h"

namespace inkstone::testing {

inline std::filesystem::path source_dir() { return INKSTONE_SOURCE_DIR; }
inline std::filesystem::path cli_binary() { return INKSTONE_BINARY; }

// The shared data sets sit beside the repository when present; tests that need them skip otherwise.
inline std::filesystem::path shared_data_dir() { return source_dir().parent_path() / "shared" / "data"; }

// A fresh, empty temporary folder for one test.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("inkstone_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace inkstone::testing
