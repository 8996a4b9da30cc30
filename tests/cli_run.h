// Runs the built `inkstone` CLI from a test and captures its exit code and output.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace inkstone::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::string shell_quote(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

inline CliResult run_command(const std::vector<std::string>& argv) {
  std::string command;
  for (const auto& word : argv) command += shell_quote(word) + " ";
  command += "2>&1";
  CliResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer{};
  size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), got);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline CliResult run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), cli_binary().string());
  return run_command(args);
}

inline std::filesystem::path hf_fixture(const std::string& name) {
  return source_dir() / "tests" / "interop" / "fixtures" / name;
}

// The project's Python environment with transformers (`make setup-python`); empty when it is absent.
inline std::filesystem::path reference_python() {
  const auto python = source_dir() / ".venv" / "bin" / "python";
  if (!std::filesystem::exists(python)) return {};
  return run_command({python.string(), "-c", "import transformers, safetensors"}).exit_code == 0 ? python
                                                                                              : std::filesystem::path();
}

}  // namespace inkstone::testing
