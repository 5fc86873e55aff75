// The document reader and the train/val split; see documents.h. JSON lines
// are read in 1 MiB chunks (a line is held once, never the file), and a line
// is decoded with nlohmann's SAX parser, which builds no tree: only the
// chosen field's string is kept, and its parser is iterative, so a deeply
// nested line cannot exhaust the stack.
#include "runtime/data/documents.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/data/json_line_error.h"
#include "runtime/data/token_source.h"

namespace zero {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadChunkBytes = size_t{1} << 20;

// What a file's first bytes say it is, when it is a binary format no text
// starts with; nullptr for anything else.
const char* binary_kind(const unsigned char* p, size_t n) {
  auto starts = [&](std::initializer_list<unsigned char> magic) {
    return n >= magic.size() && std::equal(magic.begin(), magic.end(), p);
  };
  if (starts({0x88, 0xD8, 0x34, 0x01}) || starts({0xA1, 0xD9, 0x34, 0x01})) {
    return "an llm.c token shard: it holds token ids already (train on it with data.format \"llmc\")";
  }
  if (starts({0x1F, 0x8B})) return "gzip-compressed: decompress it first (zcat)";
  if (starts({0x28, 0xB5, 0x2F, 0xFD})) return "zstd-compressed: decompress it first (zstdcat)";
  if (starts({'B', 'Z', 'h'})) return "bzip2-compressed: decompress it first (bzcat)";
  if (starts({0xFD, '7', 'z', 'X', 'Z', 0x00})) return "xz-compressed: decompress it first (xzcat)";
  if (starts({'P', 'A', 'R', '1'})) return "a Parquet file: export its text column as JSON lines first";
  if (starts({'P', 'K', 0x03, 0x04})) return "a zip archive: extract it first";
  return nullptr;
}

bool blank_byte(char c) { return c == ' ' || c == '\t' || c == '\r'; }

bool is_blank(const std::string& line) {
  for (char c : line)
    if (!blank_byte(c)) return false;
  return true;
}

bool jsonl_name(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson" || ext == ".json";
}

// errno after a failed read or open as a Status: a missing file or no
// permission is the user's to fix (NotFound, PermissionDenied); the rest is
// an I/O failure (DataLoss).
absl::Status io_error(int err, const std::string& what) {
  const std::string msg = cat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::DataLossError(msg);
}

// read(2) until `bytes` are read or the end of the file; returns the count.
absl::StatusOr<size_t> read_some(int fd, char* dst, size_t bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::read(fd, dst + done, bytes - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error(errno, cat("data file ", path, ": read failed"));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

// Closes a descriptor when it goes out of scope.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

// The SAX handler that keeps one top-level field of an object. Duplicate
// keys: the last one wins, as in Python's json module.
class FieldExtractor {
 public:
  using json = nlohmann::json;
  FieldExtractor(const std::string& field, std::string* out) : field_(field), out_(out) {}

  bool null() { return value("null"); }
  bool boolean(bool) { return value("a boolean"); }
  bool number_integer(json::number_integer_t) { return value("a number"); }
  bool number_unsigned(json::number_unsigned_t) { return value("a number"); }
  bool number_float(json::number_float_t, const std::string&) { return value("a number"); }
  bool binary(json::binary_t&) { return value("binary"); }
  bool string(std::string& s) {
    if (depth_ == 1 && wanted_) out_->swap(s);
    return value("a string");
  }
  bool start_object(size_t) {
    if (depth_ == 0) top_is_object = true;
    value("an object");
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(size_t) {
    value("an array");
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(std::string& k) {
    if (depth_ != 1) return true;
    wanted_ = k == field_;
    if (keys.size() < 8) keys.push_back(k);
    return true;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }

  bool top_is_object = false;
  std::string top_type;    // the kind of the whole line's value
  std::string field_type;  // the kind of the field's value; "" when absent
  std::vector<std::string> keys;  // the object's first keys, for a message
  std::string error;              // the parser's message

 private:
  // Records the kind of a value that starts at the current depth.
  bool value(const char* kind) {
    if (depth_ == 0) top_type = kind;
    if (depth_ == 1 && wanted_) field_type = kind;
    if (depth_ == 1) wanted_ = false;
    return true;
  }

  const std::string& field_;
  std::string* out_;
  int64_t depth_ = 0;
  bool wanted_ = false;
};

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += cat(out.empty() ? "" : ", ", "\"", k, "\"");
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DocumentReader>> DocumentReader::open(const DocumentOptions& options) {
  if (options.inputs.empty()) {
    return absl::InvalidArgumentError("no input: name text or JSON-lines files, directories or globs");
  }
  if (options.max_document_bytes < 1) {
    return absl::InvalidArgumentError(cat("max_document_bytes ", options.max_document_bytes, " must be at least 1"));
  }
  if (options.jsonl_field.empty()) return absl::InvalidArgumentError("the JSON-lines field name is empty");
  std::unique_ptr<DocumentReader> r(new DocumentReader());
  r->options_ = options;
  std::map<std::string, size_t> named_by;  // a file's canonical path -> the index of the input that named it
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    const std::string& input = options.inputs[i];
    ZE_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_data_path(input));
    for (std::string& f : files) {
      std::error_code ec;
      const std::string canonical = fs::weakly_canonical(f, ec).string();
      const auto [it, fresh] = named_by.emplace(ec ? f : canonical, i);
      // A link beside its target in one directory or glob (Debian's
      // common-licenses/GPL -> GPL-3) is an alias: the file is read once.
      if (!fresh && it->second == i) continue;
      if (!fresh) {
        return absl::InvalidArgumentError(cat("data file ", f, " is named twice, by input ",
                                              options.inputs[it->second], " and by ", input,
                                              ": its documents would be tokenized twice"));
      }
      r->files_.push_back(std::move(f));
    }
  }
  for (const std::string& f : r->files_) {
    r->jsonl_.push_back(options.format == DocumentFormat::kJsonl ||
                        (options.format == DocumentFormat::kAuto && jsonl_name(f)));
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error(errno, cat("data file ", f, ": cannot open"));
    FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) return io_error(errno, cat("data file ", f, ": cannot stat"));
    r->total_bytes_ += st.st_size;
    unsigned char head[8];
    ZE_ASSIGN_OR_RETURN(const size_t n, read_some(fd, reinterpret_cast<char*>(head), sizeof(head), f));
    if (const char* kind = binary_kind(head, n)) {
      return absl::InvalidArgumentError(cat("data file ", f, ": is ", kind, "; not text or JSON lines"));
    }
  }
  return r;
}

DocumentReader::~DocumentReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status DocumentReader::open_file(size_t file) {
  fd_ = ::open(files_[file].c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return io_error(errno, cat("data file ", files_[file], ": cannot open"));
  line_ = 0;
  buffer_.clear();
  buffer_pos_ = 0;
  file_eof_ = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> DocumentReader::read_line(std::string* line) {
  const int64_t max_line_bytes = 2 * options_.max_document_bytes + (int64_t{1} << 20);
  size_t searched = 0;  // bytes after buffer_pos_ known to hold no newline
  while (true) {
    const char* start = buffer_.data() + buffer_pos_;
    const size_t avail = buffer_.size() - buffer_pos_;
    if (const void* nl = std::memchr(start + searched, '\n', avail - searched)) {
      const size_t len = static_cast<size_t>(static_cast<const char*>(nl) - start);
      line->assign(start, len);
      buffer_pos_ += len + 1;
      bytes_read_ += static_cast<int64_t>(len + 1);
      ++line_;
      return true;
    }
    searched = avail;
    if (static_cast<int64_t>(avail) > max_line_bytes) {
      return absl::InvalidArgumentError(cat(files_[file_], ":", line_ + 1, ": the line is longer than ",
                                            max_line_bytes, " bytes (2 x max_document_bytes + 1 MiB); is it JSON "
                                            "lines, one object per line?"));
    }
    if (file_eof_) {
      if (avail == 0) return false;
      line->assign(start, avail);
      buffer_pos_ = buffer_.size();
      bytes_read_ += static_cast<int64_t>(avail);
      ++line_;
      return true;
    }
    buffer_.erase(0, buffer_pos_);
    buffer_pos_ = 0;
    const size_t old = buffer_.size();
    buffer_.resize(old + kReadChunkBytes);
    absl::StatusOr<size_t> got = read_some(fd_, buffer_.data() + old, kReadChunkBytes, files_[file_]);
    if (!got.ok()) return annotate(got.status(), cat("at line ", line_ + 1));
    buffer_.resize(old + *got);
    file_eof_ = *got < kReadChunkBytes;
  }
}

absl::StatusOr<bool> DocumentReader::next(Document* doc, bool decode) {
  while (file_ < files_.size()) {
    const std::string& path = files_[file_];
    if (!jsonl_[file_]) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return io_error(errno, cat("data file ", path, ": cannot open"));
      FdCloser closer{fd};
      // One byte past the limit tells a file over it from one exactly at it.
      const int64_t cap = options_.max_document_bytes + 1;
      doc->text.clear();
      for (size_t n = kReadChunkBytes; n == kReadChunkBytes && static_cast<int64_t>(doc->text.size()) < cap;) {
        const size_t old = doc->text.size();
        doc->text.resize(old + kReadChunkBytes);
        ZE_ASSIGN_OR_RETURN(n, read_some(fd, doc->text.data() + old, kReadChunkBytes, path));
        doc->text.resize(old + n);
      }
      if (static_cast<int64_t>(doc->text.size()) > options_.max_document_bytes) {
        return absl::InvalidArgumentError(cat("data file ", path, ": is over the document limit of ",
                                              options_.max_document_bytes, " bytes (max_document_bytes; a text "
                                              "file is one document: split it, or raise the limit)"));
      }
      bytes_read_ += static_cast<int64_t>(doc->text.size());
      doc->record = next_record_++;
      doc->file = static_cast<int32_t>(file_);
      doc->line = 0;
      doc->decoded = true;
      ++file_;
      return true;
    }
    if (fd_ < 0) ZE_RETURN_IF_ERROR(open_file(file_));
    ZE_ASSIGN_OR_RETURN(const bool got, read_line(&doc->text));
    if (!got) {
      ::close(fd_);
      fd_ = -1;
      buffer_.clear();
      buffer_.shrink_to_fit();
      ++file_;
      continue;
    }
    if (is_blank(doc->text)) continue;
    doc->record = next_record_++;
    doc->file = static_cast<int32_t>(file_);
    doc->line = line_;
    doc->decoded = false;
    if (decode) ZE_RETURN_IF_ERROR(this->decode(doc));
    return true;
  }
  return false;
}

absl::Status DocumentReader::decode(Document* doc) const {
  if (doc->decoded) return absl::OkStatus();
  const std::string& field = options_.jsonl_field;
  std::string text;
  FieldExtractor sax(field, &text);
  try {
    nlohmann::json::sax_parse(doc->text, &sax);
  } catch (const nlohmann::json::exception& e) {  // the parser reports through the handler; this is a backstop
    sax.error = e.what();
  }
  if (!sax.error.empty()) {
    return absl::InvalidArgumentError(cat(where(*doc), ": not valid JSON (", json_line_error_text(sax.error), ")"));
  }
  if (!sax.top_is_object) {
    return absl::InvalidArgumentError(cat(where(*doc), ": expected a JSON object with a \"", field, "\" field, got ",
                                          sax.top_type));
  }
  if (sax.field_type.empty()) {
    return absl::InvalidArgumentError(cat(where(*doc), ": no field \"", field, "\" (the object's fields: ",
                                          sax.keys.empty() ? "none" : quoted_list(sax.keys), ")"));
  }
  if (sax.field_type != "a string") {
    return absl::InvalidArgumentError(cat(where(*doc), ": field \"", field, "\" is ", sax.field_type,
                                          ", not a string"));
  }
  if (static_cast<int64_t>(text.size()) > options_.max_document_bytes) {
    return absl::InvalidArgumentError(cat(where(*doc), ": the document is ", text.size(),
                                          " bytes, over the limit of ", options_.max_document_bytes,
                                          " bytes (max_document_bytes)"));
  }
  doc->text = std::move(text);
  doc->decoded = true;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> DocumentReader::count_records() const {
  int64_t records = 0;
  std::vector<char> chunk(kReadChunkBytes);
  for (size_t f = 0; f < files_.size(); ++f) {
    if (!jsonl_[f]) {
      ++records;
      continue;
    }
    const int fd = ::open(files_[f].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error(errno, cat("data file ", files_[f], ": cannot open"));
    FdCloser closer{fd};
    bool nonblank = false;  // the current line has a byte other than space, tab, CR
    for (size_t n = chunk.size(); n == chunk.size();) {
      ZE_ASSIGN_OR_RETURN(n, read_some(fd, chunk.data(), chunk.size(), files_[f]));
      for (size_t i = 0; i < n; ++i) {
        const char c = chunk[i];
        if (c == '\n') {
          records += nonblank ? 1 : 0;
          nonblank = false;
        } else if (!blank_byte(c)) {
          nonblank = true;
        }
      }
    }
    records += nonblank ? 1 : 0;
  }
  return records;
}

std::string DocumentReader::where(const Document& doc) const {
  const std::string& path = files_[static_cast<size_t>(doc.file)];
  return doc.line > 0 ? cat(path, ":", doc.line) : path;
}

std::string DocumentReader::describe() const {
  size_t jsonl = 0;
  for (bool j : jsonl_) jsonl += j ? 1 : 0;
  const size_t text = files_.size() - jsonl;
  std::string out;
  if (jsonl > 0) {
    out += cat(jsonl, " JSON-lines file", jsonl == 1 ? "" : "s", " (field \"", options_.jsonl_field, "\")");
  }
  if (text > 0) out += cat(out.empty() ? "" : " and ", text, " text file", text == 1 ? "" : "s");
  return cat(out, ", ", total_bytes_, " bytes");
}

bool DocumentSplit::is_val(int64_t record) const {
  if (val_records <= 0 || record < 0 || record >= records) return false;
  using u128 = unsigned __int128;
  const auto m = static_cast<u128>(records), n = static_cast<u128>(val_records);
  // Stretch k is records [ceil(k*m/n), ceil((k+1)*m/n)): n stretches of
  // floor(m/n) or ceil(m/n) records; record r lies in stretch floor(r*n/m).
  auto first_of = [&](u128 k) { return static_cast<int64_t>((k * m + n - 1) / n); };
  const u128 k = static_cast<u128>(record) * n / m;
  const int64_t first = first_of(k), len = first_of(k + 1) - first;
  const uint64_t pick = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(k))) % static_cast<uint64_t>(len);
  return record - first == static_cast<int64_t>(pick);
}

}  // namespace zero
