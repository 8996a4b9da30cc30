#include "core/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>

#include <fmt/format.h>

#include "core/errors.h"

namespace inkstone {
namespace {

std::string read_holder(int fd) {
  char text[256] = {};
  const ssize_t got = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder.empty() ? "another process" : holder;
}

std::string this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  return fmt::format("pid {} on {} since {}\n", ::getpid(), host, when);
}

}  // namespace

RunLock::RunLock(const std::filesystem::path& run_dir) {
  std::filesystem::create_directories(run_dir);
  const auto path = run_dir / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(fmt::format("cannot open '{}': {}", path.string(), std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? read_holder(fd_) : "";
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      throw InputError(fmt::format("run folder '{}' is in use by {} (another train writes it); wait for it to end "
                                   "or choose another --run-dir",
                                   run_dir.string(), holder));
    throw InputError(fmt::format("cannot lock '{}': {}", path.string(), std::strerror(error)));
  }
  // Who holds it, for the message a second writer sees; the lock holds even if this note cannot be written.
  const std::string holder = this_process();
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, holder.data(), holder.size(), 0);
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace inkstone
