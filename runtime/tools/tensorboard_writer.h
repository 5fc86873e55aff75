// TensorBoard event files, written without TensorFlow (Debian has no C++
// writer). A file is a sequence of TFRecords:
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
// (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, CRC-32C),
// each data an Event protobuf: the first {wall_time=1, file_version=3
// "brain.Event:2"}, then scalars {wall_time=1 double, step=2 int64,
// summary=5 {value=1 {tag=1 string, simple_value=2 float}}}. The few fields
// are encoded by hand; tests/reference/read_tensorboard.py reads a file back
// with the tensorboard package.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {

// mask(crc32c(data)), TFRecord's checksum.
uint32_t tfrecord_masked_crc(std::string_view data);
// One record: the framing above around `data`.
std::string tfrecord_frame(std::string_view data);
// Event protobufs.
std::string tensorboard_file_version_event(double wall_time);
std::string tensorboard_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// A decoded record (what the test and `zero-train` users may check).
struct TensorBoardScalar {
  double wall_time = 0;
  int64_t step = 0;
  std::string tag;
  float value = 0;
  std::string file_version;  // set on the first event only
};
// Reads every record of an event file, checking both CRCs of each; fails
// naming the record and what is wrong.
absl::StatusOr<std::vector<TensorBoardScalar>> read_tensorboard_events(const std::string& path);

class TensorBoardWriter {
 public:
  // Creates dir (and parents) and dir/events.out.tfevents.<unix seconds>.<host>,
  // then writes the file_version event.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir);
  ~TensorBoardWriter();

  absl::Status add_scalar(std::string_view tag, float value, int64_t step, double wall_time);
  absl::Status flush();
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status write_record(const std::string& data);

  std::string path_;
  std::FILE* file_;
};

}  // namespace zero
