// TensorBoard event files (core/tensorboard/event_file.h): checksums and framing byte for byte, events read back,
// and a run's file after a kill and a resume. Reading by TensorBoard's own Python reader is in
// tests/tools/test_observability.cpp.
#include <gtest/gtest.h>

#include <fstream>

#include "core/errors.h"
#include "core/event_file_writer.h"
#include "tests/test_paths.h"

namespace inkstone::tensorboard {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// CRC-32C of "123456789" is the catalogue's check value 0xe3069283; masking rotates it right by 15 bits and adds
// 0xa282ead8: 0x2507c60d + 0xa282ead8 = 0xc78ab0e5 (the value tensorboard's masked_crc32c gives).
TEST(EventFile, MaskedCrc32cMatchesTheCheckValue) {
  EXPECT_EQ(masked_crc32c("123456789"), 0xc78ab0e5u);
  EXPECT_EQ(masked_crc32c(""), 0xa282ead8u);  // CRC-32C of nothing is 0
}

TEST(EventFile, RecordIsLengthChecksumPayloadChecksum) {
  const std::string record = frame_record("123456789");
  ASSERT_EQ(record.size(), 8u + 4 + 9 + 4);
  EXPECT_EQ(record.substr(0, 8), std::string("\x09\0\0\0\0\0\0\0", 8));  // uint64 little endian
  const uint32_t length_crc = masked_crc32c(record.substr(0, 8));
  EXPECT_EQ(record.substr(8, 4), std::string(reinterpret_cast<const char*>(&length_crc), 4));
  EXPECT_EQ(record.substr(12, 9), "123456789");
  EXPECT_EQ(record.substr(21, 4), std::string("\xe5\xb0\x8a\xc7", 4));  // 0xc78ab0e5, little endian
}

// The golden file was written by TensorBoard's own record writer and protobuf classes
// (tests/core/make_tensorboard_golden.py): inkstone reads it, and encodes the same events to the same bytes.
TEST(EventFile, MatchesAFileWrittenByTensorBoardByteForByte) {
  const auto golden = testing::source_dir() / "tests" / "core" / "fixtures" / "tensorboard_golden.tfevents";
  const std::vector<Event> expected = {{1.0, 0, "brain.Event:2", {}, {}},
                                       {1.5, 3, "", {{"train/loss", 2.25f}, {"system/mfu", 0.5f}}, {}},
                                       {2.5, 4, "", {}, {{"samples/0", "    the cat\n"}}}};
  const auto events = read_event_file(golden);
  ASSERT_EQ(events.size(), expected.size());
  std::string encoded;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].wall_time, expected[i].wall_time) << i;
    EXPECT_EQ(events[i].step, expected[i].step) << i;
    EXPECT_EQ(events[i].file_version, expected[i].file_version) << i;
    EXPECT_EQ(events[i].scalars, expected[i].scalars) << i;
    EXPECT_EQ(events[i].texts, expected[i].texts) << i;
    encoded += frame_record(serialize_event(expected[i]));
  }
  EXPECT_EQ(encoded, bytes_of(golden));
}

TEST(EventFile, EventsRoundTripThroughTheWriterAndReader) {
  const auto dir = testing::temp_dir("event_file_round_trip");
  {
    EventFileWriter writer(dir);
    writer.write({1.5, 3, "", {{"train/loss", 2.25f}, {"system/mfu", 0.5f}}, {}});
    writer.write({2.5, 4, "", {}, {{"samples/0", "the cat\nsat"}}});
  }
  const auto path = find_event_file(dir);
  ASSERT_TRUE(path.has_value());
  EXPECT_NE(path->filename().string().find("events.out.tfevents."), std::string::npos);
  const auto events = read_event_file(*path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].step, 3);
  EXPECT_DOUBLE_EQ(events[1].wall_time, 1.5);
  ASSERT_EQ(events[1].scalars.size(), 2u);
  EXPECT_EQ(events[1].scalars[0], std::make_pair(std::string("train/loss"), 2.25f));
  EXPECT_EQ(events[1].scalars[1], std::make_pair(std::string("system/mfu"), 0.5f));
  ASSERT_EQ(events[2].texts.size(), 1u);
  EXPECT_EQ(events[2].texts[0], std::make_pair(std::string("samples/0"), std::string("the cat\nsat")));
  fs::remove_all(dir);
}

// A kill mid-write leaves a partial last record: the reader stops before it, and a resumed run drops it together
// with the records of steps after its checkpoint, then appends.
TEST(EventFile, ResumeDropsAPartialRecordAndStepsAfterTheCheckpoint) {
  const auto dir = testing::temp_dir("event_file_resume");
  {
    EventFileWriter writer(dir);
    for (int64_t step = 1; step <= 5; ++step) writer.write({0, step, "", {{"train/loss", float(step)}}, {}});
  }
  const auto path = *find_event_file(dir);
  const std::string whole = bytes_of(path);
  const std::string partial = frame_record(serialize_event({0, 6, "", {{"train/loss", 6.0f}}, {}}));
  std::ofstream(path, std::ios::binary | std::ios::app) << partial.substr(0, partial.size() - 3);
  uint64_t complete = 0;
  EXPECT_EQ(read_event_file(path, &complete).size(), 6u);
  EXPECT_EQ(complete, whole.size());

  {
    EventFileWriter writer(dir, /*resumed_step=*/3);
    EXPECT_EQ(writer.path(), path);
    writer.write({0, 4, "", {{"train/loss", 40.0f}}, {}});
  }
  std::vector<int64_t> steps;
  std::vector<float> losses;
  for (const auto& event : read_event_file(path)) {
    steps.push_back(event.step);
    if (!event.scalars.empty()) losses.push_back(event.scalars[0].second);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(losses, (std::vector<float>{1, 2, 3, 40}));
  fs::remove_all(dir);
}

TEST(EventFile, ACorruptRecordIsRefusedNamingFileAndOffset) {
  const auto dir = testing::temp_dir("event_file_corrupt");
  {
    EventFileWriter writer(dir);
    writer.write({0, 1, "", {{"train/loss", 1.0f}}, {}});
  }
  const auto path = *find_event_file(dir);
  std::string bytes = bytes_of(path);
  const size_t header = 8 + 4 + static_cast<unsigned char>(bytes[0]) + 4;  // the first record, under 256 bytes
  bytes[bytes.size() - 6] ^= 0x40;                                         // a payload byte of the second record
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    read_event_file(path);
    FAIL() << "a corrupt record was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ": record payload checksum mismatch at byte " +
                                         std::to_string(header)),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace inkstone::tensorboard
