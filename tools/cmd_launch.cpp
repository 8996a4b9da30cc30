// `inkstone launch --nproc N [--master-port P] -- COMMAND ...`: N local ranks of one inkstone command, with the
// variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). When a rank
// fails, the others are stopped and the launcher exits with that rank's code.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/errors.h"
#include "tools/commands.h"

namespace inkstone::cli {
namespace {

struct LaunchOptions {
  int nproc = 1;
  int master_port = 0;  // 0: a free port
  double grace_s = 10;  // how long stopped ranks get to exit before SIGKILL
  std::vector<std::string> command;
};

// A port no one listens on now: bind port 0 and read what the kernel chose.
int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("launch: cannot open a socket to find a free port");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("launch: cannot find a free port; pass --master-port");
  return ntohs(address.sin_port);
}

// Runs in the forked child: the rank's environment, then this binary with the command.
[[noreturn]] void exec_rank(const std::filesystem::path& self, const LaunchOptions& o, int rank, int port) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a killed launcher takes its ranks with it
  const std::string world = std::to_string(o.nproc);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", world.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  std::vector<char*> argv{const_cast<char*>(self.c_str())};
  for (const auto& arg : o.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  ::execv(self.c_str(), argv.data());
  fmt::print(stderr, "launch: rank {}: cannot run {}\n", rank, self.string());
  ::_exit(127);
}

// The shell's convention: the exit code, or 128 + the signal that killed it.
int exit_code_of(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
}

int launch(const LaunchOptions& o) {
  if (o.command.empty())
    throw InputError("launch needs the command to run after --, e.g. inkstone launch --nproc 2 -- train cfg.toml");
  if (o.nproc < 1) throw InputError(fmt::format("--nproc {} must be at least 1", o.nproc));
  const int port = o.master_port > 0 ? o.master_port : free_local_port();
  const auto self = std::filesystem::read_symlink("/proc/self/exe");

  std::vector<pid_t> ranks(static_cast<size_t>(o.nproc), -1);
  for (int rank = 0; rank < o.nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(fmt::format("launch: cannot start rank {}", rank));
    if (pid == 0) exec_rank(self, o, rank, port);
    ranks[static_cast<size_t>(rank)] = pid;
  }

  int result = 0;
  int running = o.nproc;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (kill_at && std::chrono::steady_clock::now() > *kill_at) {
        for (pid_t p : ranks)
          if (p > 0) ::kill(p, SIGKILL);
        kill_at.reset();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const auto found = std::find(ranks.begin(), ranks.end(), pid);
    if (found == ranks.end()) continue;
    const auto rank = found - ranks.begin();
    *found = -1;
    --running;
    if (exit_code_of(status) == 0 || result != 0) continue;
    result = exit_code_of(status);
    if (running > 0) {
      fmt::print(stderr, "launch: rank {} {}; stopping the other {} rank(s)\n", rank, describe(status), running);
      for (pid_t p : ranks)
        if (p > 0) ::kill(p, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(o.grace_s));
    } else {
      fmt::print(stderr, "launch: rank {} {}\n", rank, describe(status));
    }
  }
  return result;
}

}  // namespace

void add_launch_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<LaunchOptions>();
  auto* cmd = app.add_subcommand("launch", "Run an inkstone command as N data-parallel ranks on this machine");
  cmd->add_option("--nproc", options->nproc, "Number of processes (ranks), e.g. one per GPU")->required();
  cmd->add_option("--master-port", options->master_port, "Rendezvous port on 127.0.0.1 (default: a free one)");
  cmd->add_option("--grace", options->grace_s, "Seconds the other ranks get to exit after one fails")
      ->capture_default_str();
  cmd->add_option("command", options->command, "The inkstone command after --, e.g. -- train cfg.toml");
  cmd->callback([options, &action] { action = [options] { return launch(*options); }; });
}

}  // namespace inkstone::cli
