// TensorBoard event files (runtime/tools/tensorboard_writer.h): the CRC is
// CRC-32C with TFRecord's mask, the protobuf bytes of an event are the ones
// protoc would write, a written file decodes back to its scalars, a flipped
// byte is caught by its CRC, and the committed golden file (read by
// tests/reference/read_tensorboard.py with the tensorboard package) is what
// the writer writes today. ZE_UPDATE_GOLDEN=1 rewrites it.
#include "runtime/tools/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/checkpoint/crc32c.h"

#include "tests/testing/test_files.h"

namespace zero {
namespace {

std::string tmp_dir(const std::string& name) { return testing::fresh_test_path(name); }
std::string read_all(const std::string& path) { return testing::read_file(path); }

TEST(TensorBoardWriterTest, MaskedCrcIsTfRecords) {
  // CRC-32C's check value (Castagnoli, not zlib's CRC-32 0xcbf43926).
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  // mask(0) = the mask's constant.
  EXPECT_EQ(tfrecord_masked_crc(""), 0xa282ead8u);
  const uint32_t c = crc32c("abc", 3);
  EXPECT_EQ(tfrecord_masked_crc("abc"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriterTest, ScalarEventHasProtobufBytes) {
  // Event{wall_time: 1.5, step: 300, summary{value{tag: "a", simple_value: 2}}}
  const std::string e = tensorboard_scalar_event(1.5, 300, "a", 2.0f);
  const std::string want("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f"  // 1: fixed64 1.5
                         "\x10\xac\x02"                          // 2: varint 300
                         "\x2a\x0a"                              // 5: 10 bytes
                         "\x0a\x08"                              //   1: Value, 8 bytes
                         "\x0a\x01" "a"                          //     1: tag
                         "\x15\x00\x00\x00\x40",                 //     2: fixed32 2.0f
                         24);
  EXPECT_EQ(e, want);
  const std::string framed = tfrecord_frame(e);
  ASSERT_EQ(framed.size(), 8 + 4 + e.size() + 4);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x18\0\0\0\0\0\0\0", 8));  // length 24, little-endian
  EXPECT_EQ(framed.substr(12, e.size()), e);
}

TEST(TensorBoardWriterTest, WrittenFileDecodesBack) {
  const std::string dir = tmp_dir("run");
  std::string path;
  {
    auto w = TensorBoardWriter::open(dir).value();
    path = w->path();
    ASSERT_TRUE(w->add_scalar("Train/Samples/train_loss", 5.25f, 8, 1700000000.5).ok());
    ASSERT_TRUE(w->add_scalar("Train/Samples/lr", 0.003f, 8, 1700000000.5).ok());
    ASSERT_TRUE(w->add_scalar("Train/Samples/train_loss", 4.5f, 16, 1700000001.0).ok());
    ASSERT_TRUE(w->flush().ok());
  }
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir));
  EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  auto events = read_tensorboard_events(path).value();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_EQ(events[1].tag, "Train/Samples/train_loss");
  EXPECT_EQ(events[1].value, 5.25f);
  EXPECT_EQ(events[1].step, 8);
  EXPECT_EQ(events[1].wall_time, 1700000000.5);
  EXPECT_EQ(events[2].tag, "Train/Samples/lr");
  EXPECT_EQ(events[2].value, 0.003f);
  EXPECT_EQ(events[3].step, 16);
  EXPECT_EQ(events[3].value, 4.5f);

  // A flipped byte in the data fails its CRC, naming the record.
  std::string bytes = read_all(path);
  bytes[bytes.size() - 6] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  absl::StatusOr<std::vector<TensorBoardScalar>> bad = read_tensorboard_events(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("record 3"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("data CRC mismatch"), std::string::npos) << bad.status();
}

// The golden file: fixed wall times, three scalars.
std::string golden_bytes() {
  std::string b = tfrecord_frame(tensorboard_file_version_event(1700000000.0));
  b += tfrecord_frame(tensorboard_scalar_event(1700000001.0, 8, "Train/Samples/train_loss", 5.5f));
  b += tfrecord_frame(tensorboard_scalar_event(1700000001.0, 8, "Train/Samples/lr", 0.003f));
  b += tfrecord_frame(tensorboard_scalar_event(1700000002.0, 16, "Train/Samples/train_loss", 4.25f));
  return b;
}

TEST(TensorBoardWriterTest, GoldenFileIsWhatTheWriterWrites) {
  const std::string golden = std::string(ZE_SOURCE_DIR) + "/tests/data/tensorboard/events.out.tfevents.golden";
  if (std::getenv("ZE_UPDATE_GOLDEN") != nullptr) std::ofstream(golden, std::ios::binary) << golden_bytes();
  EXPECT_EQ(read_all(golden), golden_bytes()) << "rerun with ZE_UPDATE_GOLDEN=1 to rewrite " << golden;
  auto events = read_tensorboard_events(golden).value();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[3].value, 4.25f);
  EXPECT_EQ(events[3].step, 16);
}

}  // namespace
}  // namespace zero
