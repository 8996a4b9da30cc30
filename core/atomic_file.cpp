#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace inkstone {
namespace {

[[noreturn]] void fail(const std::string& what, const std::filesystem::path& path) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(errno));
}

std::filesystem::path parent_or_current(const std::filesystem::path& path) {
  auto parent = path.parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path path)
    : path_(std::move(path)), temp_path_(path_.string() + ".tmp-" + std::to_string(::getpid())) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", temp_path_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd_, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", temp_path_);
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

// Reports errno as it was at the failure, not as unlink() left it.
void AtomicFile::discard_temp_and_fail(const std::string& what, const std::filesystem::path& path) {
  int error = errno;
  ::unlink(temp_path_.c_str());
  errno = error;
  fail(what, path);
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot fsync", temp_path_);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) discard_temp_and_fail("cannot close", temp_path_);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) discard_temp_and_fail("cannot rename into", path_);
  fsync_path(parent_or_current(path_));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

void fsync_path(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("cannot fsync", path);
}

}  // namespace inkstone
