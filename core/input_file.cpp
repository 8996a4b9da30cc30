#include "core/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include <fmt/format.h>

#include "core/errors.h"

namespace inkstone {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void require_regular_file(const std::filesystem::path& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)  // follows links: a link to /dev/zero is a device
    throw InputError(fmt::format("{}: cannot open the {} ({})", path.string(), what, std::strerror(errno)));
  if (!S_ISREG(info.st_mode))
    throw InputError(fmt::format("{}: the {} is {}, not a regular file", path.string(), what, kind_of(info.st_mode)));
}

std::ifstream open_input_file(const std::filesystem::path& path, const std::string& what) {
  require_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open the {} ({})", path.string(), what, std::strerror(errno)));
  return in;
}

std::string read_input_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in = open_input_file(path, what);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(fmt::format("{}: cannot read the {}", path.string(), what));
  return text.str();
}

}  // namespace inkstone
