#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"

namespace inkstone {

MappedFile::MappedFile(const std::filesystem::path& path, const std::string& what, Access access) {
  require_regular_file(path, what);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open ({})", path.string(), std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_size == 0) {
    ::close(fd);
    throw InputError(fmt::format("{}: empty file", path.string()));
  }
  const int protection = access == Access::copy_on_write ? PROT_READ | PROT_WRITE : PROT_READ;
  void* mapped = ::mmap(nullptr, static_cast<size_t>(info.st_size), protection, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file open
  if (mapped == MAP_FAILED)
    throw InputError(fmt::format("{}: cannot memory-map ({})", path.string(), std::strerror(errno)));
  data_ = static_cast<unsigned char*>(mapped);
  size_ = info.st_size;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, static_cast<size_t>(size_));
}

MappedFile::MappedFile(MappedFile&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

}  // namespace inkstone
