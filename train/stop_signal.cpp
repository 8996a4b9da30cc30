#include "train/stop_signal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace inkstone {
namespace {

volatile std::sig_atomic_t received = 0;

// A hang-up means the terminal or ssh session that read stdout and stderr is gone: a write to it would fail (EIO)
// or kill the process (SIGPIPE) before the checkpoint. Such outputs are pointed at /dev/null; a regular file (a
// redirected log) keeps receiving. Only async-signal-safe calls (fstat, open, dup2, close).
void silence_lost_outputs() {
  const int sink = ::open("/dev/null", O_WRONLY);
  if (sink < 0) return;
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat info {};
    if (::fstat(fd, &info) == 0 && !S_ISREG(info.st_mode)) ::dup2(sink, fd);
  }
  ::close(sink);
}

void on_stop_signal(int number) {
  const int saved_errno = errno;  // the interrupted code may be about to read it
  if (number == SIGHUP) {
    silence_lost_outputs();
    // A lost session often sends more than one hang-up (the shell forwards one, the kernel sends another to the
    // foreground group): only the first counts, and none ends the run before its checkpoint.
    if (received == 0) received = number;
    errno = saved_errno;
    return;
  }
  if (received != 0) {
    // The second signal: the default action (terminate with this signal), now.
    std::signal(number, SIG_DFL);
    std::raise(number);
    return;
  }
  received = number;
  errno = saved_errno;
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes in flight finish; the loop looks at the flag between steps
  for (int number : {SIGTERM, SIGINT, SIGUSR1}) sigaction(number, &action, nullptr);
  // A run started under nohup (SIGHUP ignored) keeps running when its session ends, as the user asked.
  struct sigaction hangup {};
  if (sigaction(SIGHUP, nullptr, &hangup) == 0 && hangup.sa_handler != SIG_IGN) sigaction(SIGHUP, &action, nullptr);
}

int stop_signal_received() { return static_cast<int>(received); }

int StopVote::cast() {
  if (!distributed_.active()) return stop_signal_received();
  const int outcome = voted_ ? previous_.values().item<int>() : 0;
  auto flag = torch::full({1}, stop_signal_received(), torch::TensorOptions().dtype(torch::kInt).device(device_));
  distributed_.all_reduce({flag}, ReduceOp::max);
  previous_ = HostCopy(flag);
  voted_ = true;
  return outcome;
}

}  // namespace inkstone
