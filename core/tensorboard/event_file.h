// TensorBoard event files, encoded and read without Python: a file is a sequence of records, each a serialised
// Event framed by its length and two masked CRC-32C checksums (docs/observability.md, "Event files"). This part
// is compiled apart from libtorch (whose pip build ships protobuf headers of another version), its interface is
// plain C++, and it uses nothing of inkstone's libraries; core/event_file_writer.h keeps a run's file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inkstone::tensorboard {

// CRC-32C (Castagnoli) of `bytes`, rotated right by 15 bits plus 0xa282ead8: TensorBoard masks its checksums so
// that a checksum of data that itself holds checksums stays well mixed.
uint32_t masked_crc32c(std::string_view bytes);

// One record: uint64 length, masked CRC of those 8 bytes, the payload, masked CRC of the payload (little endian).
std::string frame_record(std::string_view payload);

// One event: a step's scalars and texts (a text is shown by TensorBoard's text plugin); or, with file_version,
// the header event a file starts with.
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;      // tag, value
  std::vector<std::pair<std::string, std::string>> texts;  // tag, text
};

std::string serialize_event(const Event& event);
Event parse_event(std::string_view payload);  // throws std::runtime_error for bytes that are not an Event

// The events of a file in order, checksums verified. A record cut short at the end (a killed writer) ends the
// list; a checksum mismatch or a malformed record elsewhere is an InputError naming the file and byte offset.
// `complete_bytes`, when given, receives the length of the whole records.
std::vector<Event> read_event_file(const std::filesystem::path& path, uint64_t* complete_bytes = nullptr);

}  // namespace inkstone::tensorboard
