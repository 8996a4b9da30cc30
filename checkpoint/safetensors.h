// The safetensors file format (Hugging Face): named tensors that Python and other tools read without pickle.
// Layout: an 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}} plus an
// optional "__metadata__" string map, padded with spaces so the data starts 8-byte aligned, then the raw
// little-endian tensor bytes, each tensor at [begin, end) of the data section, packed without gaps.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace inkstone {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;  // CPU tensors in the order of their bytes in the file (sorted by name for our files)
  std::map<std::string, std::string> metadata;
};

// Writes F32, F64, BF16, F16, I64, I32, I16, U8 and BOOL tensors (copied to the CPU, made contiguous) with
// their bytes in sorted-name order, atomically (core/atomic_file.h). A duplicate name or another dtype is a
// programming error: std::invalid_argument.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor to be written without holding every tensor in memory: its dtype and shape go into the header first,
// then `produce` is called once, in name order, and must return exactly that dtype and shape.
struct PlannedTensor {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  std::function<torch::Tensor()> produce;
};
uint64_t planned_bytes(const PlannedTensor& tensor);

// write_safetensors for planned tensors: peak memory is one produced tensor (the import of a large checkpoint).
void write_safetensors_streamed(const std::filesystem::path& path, std::vector<PlannedTensor> tensors,
                                const std::map<std::string, std::string>& metadata = {});

// Reads and validates the whole file; any defect (too short, header length past the end, invalid JSON, unknown
// dtype, offsets out of range, overlapping, leaving gaps or disagreeing with the shape, truncated data) is an
// InputError of one line that starts with the file's path.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// The header of a file, validated as read_safetensors does, and one tensor at a time read on demand: a caller
// that converts and writes tensor by tensor never holds the whole file.
class SafetensorsReader {
 public:
  struct TensorInfo {
    std::string name;
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;  // in the data section
  };
  explicit SafetensorsReader(const std::filesystem::path& path);
  const std::vector<TensorInfo>& tensors() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }
  // nullptr when the file has no such tensor.
  const TensorInfo* find(const std::string& name) const;
  // A new CPU tensor with the bytes of `name`; an InputError naming the file when it is absent or truncated.
  torch::Tensor read(const std::string& name) const;

 private:
  std::filesystem::path path_;
  uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> entries_;
};

}  // namespace inkstone
