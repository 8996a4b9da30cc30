// Files the program is given to read. A path that is not a regular file is refused by name before it is opened:
// a directory reads as empty (a config would train on defaults), a FIFO blocks until a writer appears, and a
// device such as /dev/zero (or a link to one) never ends (docs/reliability.md).
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

namespace inkstone {

// InputError "PATH: the WHAT is a directory / a FIFO / a device ..., not a regular file", or "PATH: no such WHAT".
void require_regular_file(const std::filesystem::path& path, const std::string& what);

// A binary stream of a checked regular file; InputError naming the path and `what` when it cannot be opened.
std::ifstream open_input_file(const std::filesystem::path& path, const std::string& what);

// The whole file.
std::string read_input_file(const std::filesystem::path& path, const std::string& what);

}  // namespace inkstone
