// Child processes for the data-parallel tests: start one with extra environment variables, wait for it with a
// deadline, read what it printed; and the largest difference between two sets of named tensors.
#pragma once
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"

namespace inkstone::testing {

struct Child {
  pid_t pid = -1;
  std::filesystem::path output;  // stdout and stderr
};

// Starts `argv` with `env` added, its output in `output`.
inline Child spawn(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::filesystem::path& output) {
  Child child{::fork(), output};
  if (child.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that dies takes its children with it
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::FILE* out = std::fopen(output.c_str(), "w");
    ::dup2(::fileno(out), 1);
    ::dup2(::fileno(out), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return child;
}

// The exit code (128 + signal when killed); -1 when it is still running at the deadline (it is then killed).
inline int wait_for(const Child& child, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(child.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child.pid, SIGKILL);
      ::waitpid(child.pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The largest absolute difference between tensors of the same name (a name missing from `b` is a failure).
inline double max_difference(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  std::map<std::string, torch::Tensor> by_name(b.begin(), b.end());
  double difference = 0;
  for (const auto& [name, tensor] : a) {
    if (!by_name.count(name)) {
      ADD_FAILURE() << name << " is missing";
      continue;
    }
    difference = std::max(difference, (tensor.to(torch::kDouble) - by_name.at(name).to(torch::kDouble))
                                          .abs().max().item<double>());
  }
  return difference;
}

}  // namespace inkstone::testing
