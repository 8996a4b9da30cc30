// A memory mapping of a whole file: token shards are read through one, and so are the tensors of a safetensors
// file, which then live in the page cache instead of a second copy in the process's own memory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace inkstone {

class MappedFile {
 public:
  // read_only: writing through data() faults. copy_on_write: a write makes a private copy of the page and never
  // reaches the file (tensors made on the mapping may be changed in place by whoever holds them).
  enum class Access { read_only, copy_on_write };

  // InputError naming the path and `what` when it is not a regular file, is empty or cannot be mapped.
  MappedFile(const std::filesystem::path& path, const std::string& what, Access access = Access::read_only);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;

  const unsigned char* data() const { return data_; }
  unsigned char* writable_data() const { return data_; }  // copy_on_write mappings only
  int64_t size() const { return size_; }

 private:
  unsigned char* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace inkstone
