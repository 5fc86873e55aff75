// TensorBoard event files; see tensorboard_writer.h.
#include "runtime/tools/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/status.h"
#include "core/strings.h"
#include "runtime/checkpoint/crc32c.h"

namespace zero {

namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, uint32_t field, uint32_t wire) { put_varint(out, (uint64_t{field} << 3) | wire); }
template <typename T>
void put_fixed(std::string& out, T v) {  // little-endian hosts only (x86-64, aarch64)
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// A minimal protobuf reader over one message.
struct Reader {
  std::string_view in;
  size_t at = 0;
  bool ok = true;
  bool done() const { return at >= in.size() || !ok; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at >= in.size()) break;
      const uint8_t b = static_cast<uint8_t>(in[at++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    ok = false;
    return 0;
  }
  template <typename T>
  T fixed() {
    T v{};
    if (at + sizeof(T) > in.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (!ok || n > in.size() - at) {
      ok = false;
      return {};
    }
    std::string_view b = in.substr(at, n);
    at += n;
    return b;
  }
  void skip(uint32_t wire) {
    if (wire == kVarint) varint();
    else if (wire == kFixed64) fixed<uint64_t>();
    else if (wire == kFixed32) fixed<uint32_t>();
    else if (wire == kLengthDelimited) bytes();
    else ok = false;
  }
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

uint32_t tfrecord_masked_crc(std::string_view data) {
  const uint32_t crc = crc32c(data.data(), data.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  std::string length;
  put_fixed<uint64_t>(length, data.size());
  out += length;
  put_fixed<uint32_t>(out, tfrecord_masked_crc(length));
  out.append(data);
  put_fixed<uint32_t>(out, tfrecord_masked_crc(data));
  return out;
}

std::string tensorboard_file_version_event(double wall_time) {
  std::string e;
  put_tag(e, 1, kFixed64);
  put_fixed<double>(e, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string tensorboard_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_tag(v, 2, kFixed32);
  put_fixed<float>(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e;
  put_tag(e, 1, kFixed64);
  put_fixed<double>(e, wall_time);
  put_tag(e, 2, kVarint);
  put_varint(e, static_cast<uint64_t>(step));
  put_bytes(e, 5, summary);
  return e;
}

absl::StatusOr<std::vector<TensorBoardScalar>> read_tensorboard_events(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(cat("TensorBoard file ", path, ": cannot open"));
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<TensorBoardScalar> events;
  size_t at = 0;
  while (at < file.size()) {
    const std::string where = cat(path, ": record ", events.size(), " at byte ", at);
    if (file.size() - at < 12) return absl::DataLossError(cat(where, ": truncated header"));
    const std::string_view length_bytes(file.data() + at, 8);
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, length_bytes.data(), 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    if (length_crc != tfrecord_masked_crc(length_bytes)) return absl::DataLossError(cat(where, ": length CRC mismatch"));
    if (length > file.size() - at - 12 || file.size() - at - 12 - length < 4) {
      return absl::DataLossError(cat(where, ": length ", length, " runs past the end of the file"));
    }
    const std::string_view data(file.data() + at + 12, length);
    std::memcpy(&data_crc, file.data() + at + 12 + length, 4);
    if (data_crc != tfrecord_masked_crc(data)) return absl::DataLossError(cat(where, ": data CRC mismatch"));
    at += 12 + length + 4;

    TensorBoardScalar s;
    Reader e{data};
    while (!e.done()) {
      const uint64_t key = e.varint();
      const uint32_t field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
      if (field == 1 && wire == kFixed64) {
        s.wall_time = e.fixed<double>();
      } else if (field == 2 && wire == kVarint) {
        s.step = static_cast<int64_t>(e.varint());
      } else if (field == 3 && wire == kLengthDelimited) {
        s.file_version = std::string(e.bytes());
      } else if (field == 5 && wire == kLengthDelimited) {
        Reader summary{e.bytes()};
        while (!summary.done()) {
          const uint64_t k = summary.varint();
          if ((k >> 3) != 1 || (k & 7) != kLengthDelimited) {
            summary.skip(static_cast<uint32_t>(k & 7));
            continue;
          }
          Reader value{summary.bytes()};
          while (!value.done()) {
            const uint64_t vk = value.varint();
            if (vk == ((1 << 3) | kLengthDelimited)) s.tag = std::string(value.bytes());
            else if (vk == ((2 << 3) | kFixed32)) s.value = value.fixed<float>();
            else value.skip(static_cast<uint32_t>(vk & 7));
          }
          if (!value.ok) e.ok = false;
        }
        if (!summary.ok) e.ok = false;
      } else {
        e.skip(wire);
      }
    }
    if (!e.ok) return absl::DataLossError(cat(where, ": malformed Event protobuf"));
    events.push_back(std::move(s));
  }
  return events;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(cat("tensorboard: cannot create ", dir, ": ", ec.message()));
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = static_cast<double>(std::time(nullptr));
  const std::string path = cat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) return absl::PermissionDeniedError(cat("tensorboard: cannot open ", path, ": ", errno_text()));
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(path, f));
  ZE_RETURN_IF_ERROR(w->write_record(tensorboard_file_version_event(now)));
  ZE_RETURN_IF_ERROR(w->flush());
  return w;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::write_record(const std::string& data) {
  const std::string record = tfrecord_frame(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return absl::DataLossError(cat("tensorboard: writing ", path_, ": ", errno_text()));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::add_scalar(std::string_view tag, float value, int64_t step, double wall_time) {
  return write_record(tensorboard_scalar_event(wall_time, step, tag, value));
}

absl::Status TensorBoardWriter::flush() {
  if (std::fflush(file_) != 0) return absl::DataLossError(cat("tensorboard: writing ", path_, ": ", errno_text()));
  return absl::OkStatus();
}

}  // namespace zero
