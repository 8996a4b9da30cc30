// The safetensors file format (Hugging Face): named tensors that Python and other tools read without pickle.
// Layout: an 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}} plus an
// optional "__metadata__" string map, padded with spaces so the data starts 8-byte aligned, then the raw
// little-endian tensor bytes, each tensor at [begin, end) of the data section, packed without gaps.
#pragma once
#include <filesystem>
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

// Reads and validates the whole file; any defect (too short, header length past the end, invalid JSON, unknown
// dtype, offsets out of range, overlapping, leaving gaps or disagreeing with the shape, truncated data) is an
// InputError of one line that starts with the file's path.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

}  // namespace inkstone
