#include "core/tensorboard/event_file.h"

#include <boost/crc.hpp>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/errors.h"
#include "core/tensorboard/tensorboard_event.pb.h"  // generated

namespace inkstone::tensorboard {
namespace {

constexpr size_t kHeaderBytes = 12;  // length and its checksum
constexpr size_t kFooterBytes = 4;   // the payload's checksum

void append_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t read_little_endian(std::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

std::string read_whole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open event file " + path.string());
  std::ostringstream whole;
  whole << in.rdbuf();
  return whole.str();
}

}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;  // CRC-32C, reflected
  crc.process_bytes(bytes.data(), bytes.size());
  const uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view payload) {
  std::string record;
  append_little_endian(record, payload.size(), 8);
  append_little_endian(record, masked_crc32c(record), 4);
  record.append(payload);
  append_little_endian(record, masked_crc32c(payload), 4);
  return record;
}

std::string serialize_event(const Event& event) {
  proto::Event message;
  message.set_wall_time(event.wall_time);
  message.set_step(event.step);
  if (!event.file_version.empty()) {
    message.set_file_version(event.file_version);
    return message.SerializeAsString();
  }
  auto* summary = message.mutable_summary();
  for (const auto& [tag, value] : event.scalars) {
    auto* entry = summary->add_value();
    entry->set_tag(tag);
    entry->set_simple_value(value);
  }
  for (const auto& [tag, text] : event.texts) {
    auto* entry = summary->add_value();
    entry->set_tag(tag);
    entry->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
    auto* tensor = entry->mutable_tensor();
    tensor->set_dtype(proto::DT_STRING);
    tensor->mutable_tensor_shape()->add_dim()->set_size(1);
    tensor->add_string_val(text);
  }
  return message.SerializeAsString();
}

Event parse_event(std::string_view payload) {
  proto::Event message;
  if (!message.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    throw std::runtime_error("not a TensorBoard Event message");
  Event event;
  event.wall_time = message.wall_time();
  event.step = message.step();
  event.file_version = message.file_version();
  for (const auto& entry : message.summary().value()) {
    if (entry.has_tensor() && entry.tensor().dtype() == proto::DT_STRING && entry.tensor().string_val_size() == 1)
      event.texts.emplace_back(entry.tag(), entry.tensor().string_val(0));
    else if (entry.value_case() == proto::Summary::Value::kSimpleValue)
      event.scalars.emplace_back(entry.tag(), entry.simple_value());
    else
      throw std::runtime_error("summary value '" + entry.tag() + "' is neither a scalar nor a text");
  }
  return event;
}

std::vector<Event> read_event_file(const std::filesystem::path& path, uint64_t* complete_bytes) {
  const std::string bytes = read_whole(path);
  const std::string_view all(bytes);
  std::vector<Event> events;
  size_t at = 0;
  auto fail = [&](const std::string& what) {
    throw InputError(path.string() + ": " + what + " at byte " + std::to_string(at));
  };
  while (all.size() - at >= kHeaderBytes) {
    const std::string_view length_bytes = all.substr(at, 8);
    if (read_little_endian(all.substr(at + 8, 4)) != masked_crc32c(length_bytes))
      fail("record length checksum mismatch");
    const uint64_t length = read_little_endian(length_bytes);
    if (all.size() - at - kHeaderBytes < length + kFooterBytes) break;  // cut short by a kill
    const std::string_view payload = all.substr(at + kHeaderBytes, length);
    if (read_little_endian(all.substr(at + kHeaderBytes + length, 4)) != masked_crc32c(payload))
      fail("record payload checksum mismatch");
    try {
      events.push_back(parse_event(payload));
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
    at += kHeaderBytes + length + kFooterBytes;
  }
  if (complete_bytes) *complete_bytes = at;
  return events;
}

}  // namespace inkstone::tensorboard
