#include "checkpoint/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <optional>
#include <stdexcept>

#include "core/atomic_file.h"
#include "core/errors.h"
#include "core/input_file.h"

// Tensor bytes go to and from memory unchanged, which is only the format's little-endian order on such hosts.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace inkstone {
namespace {

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};

constexpr std::array<DtypeName, 9> kDtypes{{{"F32", torch::kFloat32},
                                            {"F64", torch::kFloat64},
                                            {"BF16", torch::kBFloat16},
                                            {"F16", torch::kFloat16},
                                            {"I64", torch::kInt64},
                                            {"I32", torch::kInt32},
                                            {"I16", torch::kInt16},
                                            {"U8", torch::kUInt8},
                                            {"BOOL", torch::kBool}}};

const char* dtype_name(torch::ScalarType type) {
  for (const auto& d : kDtypes)
    if (d.type == type) return d.name;
  return nullptr;
}

std::optional<torch::ScalarType> dtype_of(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  return std::nullopt;
}

constexpr size_t kAlignment = 8;

// One tensor's entry in the header, checked against itself; offsets are relative to the data section.
struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

struct Layout {
  std::vector<Entry> entries;  // in file order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

class Reader {
 public:
  explicit Reader(const std::filesystem::path& path) : path_(path) {}

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InputError(path_.string() + ": " + fmt::format(format, std::forward<Args>(args)...));
  }

  // Reads and validates the length, header and layout; the data section starts at the returned offset.
  Layout read_layout(std::ifstream& in) {
    in.seekg(0, std::ios::end);
    const uint64_t file_size = static_cast<uint64_t>(in.tellg());
    in.seekg(0);
    if (file_size < 8) fail("not a safetensors file: {} bytes, shorter than the 8-byte header length", file_size);

    std::array<unsigned char, 8> length_bytes{};
    in.read(reinterpret_cast<char*>(length_bytes.data()), 8);
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length_bytes[i];
    if (header_size > file_size - 8)
      fail("header length {} runs past the end of the file ({} bytes)", header_size, file_size);

    std::string header(header_size, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header_size));
    Layout layout;
    layout.entries = parse_header(header, layout.metadata);
    check_layout(layout.entries, file_size - 8 - header_size);
    layout.data_start = 8 + header_size;
    return layout;
  }

  std::ifstream open() const {
    return open_input_file(path_, "safetensors file");
  }

  // One tensor's bytes, read at its offset into a new tensor.
  torch::Tensor read_entry(std::ifstream& in, const Entry& e, uint64_t data_start) const {
    torch::Tensor tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    if (static_cast<uint64_t>(in.gcount()) != e.end - e.begin) fail("truncated data in tensor '{}'", e.name);
    return tensor;
  }

  SafetensorsFile read() {
    std::ifstream in = open();
    const Layout layout = read_layout(in);
    SafetensorsFile result;
    result.metadata = layout.metadata;
    for (const Entry& e : layout.entries) result.tensors.emplace_back(e.name, read_entry(in, e, layout.data_start));
    return result;
  }

 private:
  std::vector<Entry> parse_header(const std::string& text, std::map<std::string, std::string>& metadata) const {
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      // The library's message quotes the bad bytes, which may hold newlines: report the position only.
      fail("header is not valid JSON (error at byte {} of {})", e.byte, text.size());
    }
    if (!header.is_object()) fail("header is not a JSON object");

    std::vector<Entry> entries;
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) fail("__metadata__ is not an object");
        for (const auto& [key, text_value] : value.items()) {
          if (!text_value.is_string()) fail("__metadata__ value '{}' is not a string", key);
          metadata[key] = text_value.get<std::string>();
        }
        continue;
      }
      entries.push_back(parse_entry(name, value));
    }
    return entries;
  }

  Entry parse_entry(const std::string& name, const nlohmann::json& value) const {
    if (!value.is_object()) fail("entry '{}' is not an object", name);
    const auto dtype = value.find("dtype");
    const auto shape = value.find("shape");
    const auto offsets = value.find("data_offsets");
    if (dtype == value.end() || !dtype->is_string()) fail("tensor '{}' has no dtype string", name);
    if (shape == value.end() || !shape->is_array()) fail("tensor '{}' has no shape array", name);
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      fail("tensor '{}' needs data_offsets [begin, end] of two non-negative integers", name);

    Entry e;
    e.name = name;
    const auto type = dtype_of(dtype->get<std::string>());
    if (!type) fail("tensor '{}' has unknown dtype '{}'", name, dtype->get<std::string>());
    e.type = *type;
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.begin > e.end) fail("tensor '{}' has data_offsets [{}, {}] that end before they begin", name, e.begin, e.end);

    // The element count is bounded by the byte span, so overflow means a corrupt header, not a huge tensor.
    uint64_t bytes = c10::elementSize(e.type);
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned()) fail("tensor '{}' has a shape entry that is not a non-negative integer", name);
      const uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, size, &bytes))
        fail("tensor '{}' has an impossibly large shape", name);
      e.shape.push_back(static_cast<int64_t>(size));
    }
    if (bytes != e.end - e.begin)
      fail("tensor '{}' data_offsets [{}, {}] span {} bytes, but its {} shape needs {}", name, e.begin, e.end,
           e.end - e.begin, dtype->get<std::string>(), bytes);
    return e;
  }

  // The tensors must tile the data section exactly: no overlap, no gap, nothing past the end or after it.
  void check_layout(std::vector<Entry>& entries, uint64_t data_size) const {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t position = 0;
    for (const Entry& e : entries) {
      if (e.end > data_size)
        fail("truncated data or bad offsets: tensor '{}' ends at byte {} of a {}-byte data section", e.name, e.end,
             data_size);
      if (e.begin < position)
        fail("tensor '{}' data_offsets [{}, {}] overlap the previous tensor", e.name, e.begin, e.end);
      if (e.begin > position) fail("gap in the data before tensor '{}' (bytes {} to {})", e.name, position, e.begin);
      position = e.end;
    }
    if (position != data_size) fail("{} unused bytes after the last tensor", data_size - position);
  }

  std::filesystem::path path_;
};

}  // namespace

void write_safetensors_streamed(const std::filesystem::path& path, std::vector<PlannedTensor> tensors,
                                const std::map<std::string, std::string>& metadata) {
  for (const auto& t : tensors) {
    if (t.name == "__metadata__") throw std::invalid_argument("safetensors: '__metadata__' is not a tensor name");
    if (!dtype_name(t.dtype))
      throw std::invalid_argument(
          fmt::format("safetensors: tensor '{}' has unsupported dtype {}", t.name, c10::toString(t.dtype)));
  }
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].name == tensors[i - 1].name)
      throw std::invalid_argument(fmt::format("safetensors: tensor name '{}' appears twice", tensors[i].name));

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = planned_bytes(t);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((kAlignment - header_text.size() % kAlignment) % kAlignment, ' ');

  std::array<unsigned char, 8> length_bytes{};
  for (size_t i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(header_text.size() >> (8 * i));

  AtomicFile file(path);
  file.write(length_bytes.data(), length_bytes.size());
  file.write(header_text);
  for (const auto& t : tensors) {
    const torch::Tensor tensor = t.produce().detach().to(torch::kCPU).contiguous();
    if (tensor.scalar_type() != t.dtype || tensor.sizes().vec() != t.shape)
      throw std::logic_error(fmt::format("safetensors: tensor '{}' was planned as {} {} but produced {} {}", t.name,
                                         c10::toString(t.dtype), fmt::join(t.shape, "x"),
                                         c10::toString(tensor.scalar_type()), fmt::join(tensor.sizes(), "x")));
    file.write(tensor.data_ptr(), tensor.numel() * tensor.element_size());
  }
  file.commit();
}

uint64_t planned_bytes(const PlannedTensor& tensor) {
  uint64_t bytes = c10::elementSize(tensor.dtype);
  for (int64_t size : tensor.shape) bytes *= static_cast<uint64_t>(size);
  return bytes;
}

void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<PlannedTensor> planned;
  planned.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors)
    planned.push_back({name, tensor.scalar_type(), tensor.sizes().vec(), [tensor] { return tensor; }});
  write_safetensors_streamed(path, std::move(planned), metadata);
}

SafetensorsReader::SafetensorsReader(const std::filesystem::path& path) : path_(path) {
  Reader reader(path);
  std::ifstream in = reader.open();
  const Layout layout = reader.read_layout(in);
  data_start_ = layout.data_start;
  metadata_ = layout.metadata;
  for (const Entry& e : layout.entries) entries_.push_back({e.name, e.type, e.shape, e.begin, e.end});
}

const SafetensorsReader::TensorInfo* SafetensorsReader::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

torch::Tensor SafetensorsReader::read(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (!info) throw InputError(fmt::format("{}: has no tensor '{}'", path_.string(), name));
  Reader reader(path_);
  std::ifstream in = reader.open();
  return reader.read_entry(in, {info->name, info->dtype, info->shape, info->begin, info->end}, data_start_);
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) { return Reader(path).read(); }

}  // namespace inkstone
