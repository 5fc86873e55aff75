// Documents for tokenization: text files (one file is one document) and JSON
// lines (one non-blank line is one document: the string in one field of its
// object), read in order, streaming. zero-data tokenize and the trainer's
// on-the-fly tokenization read text through this one reader.
//
// Inputs are files, directories (their regular files, sorted, not recursive)
// or globs, expanded by expand_data_path (token_source.h), each input's files
// in order. A file two inputs name is refused; two names of one file within
// one input (a symbolic link beside its target) are read once, as the first. With DocumentFormat::kAuto a file named *.jsonl, *.ndjson or
// *.json is JSON lines, any other file is text.
//
// A record is a text file or a non-blank JSON line (blank: only spaces, tabs
// and CRs), numbered from 0 across all files; records are what a train/val
// split counts (DocumentSplit), so the split does not depend on the contents.
// A record whose document is empty ("" or an empty file) yields an empty text.
//
// Reading happens on one thread (next()); a JSON line can be left undecoded
// and decoded later on another thread (decode() is const), so the JSON
// parsing of a large file spreads over the tokenizer's threads.
// Errors name the file and, for JSON lines, the line number: a malformed
// line, a line that is not an object, a missing or non-string field, a
// document over max_document_bytes. A file that starts like a binary format
// (an llm.c shard, gzip, zstd, bzip2, xz, Parquet) is refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {

// Large enough for a book; a larger "document" is usually a file given by mistake.
inline constexpr int64_t kDefaultMaxDocumentBytes = int64_t{64} << 20;

enum class DocumentFormat {
  kAuto,   // by file name: *.jsonl, *.ndjson, *.json are JSON lines, the rest text
  kText,   // every file is one document
  kJsonl,  // every file is JSON lines
};

struct DocumentOptions {
  std::vector<std::string> inputs;                        // files, directories or globs, in order
  DocumentFormat format = DocumentFormat::kAuto;
  std::string jsonl_field = "text";                       // the field of each JSON line holding the document
  int64_t max_document_bytes = kDefaultMaxDocumentBytes;  // a longer document is an error naming it
};

struct Document {
  std::string text;     // the document; a JSON line as read while `decoded` is false
  int64_t record = 0;   // index among all records, from 0
  int32_t file = 0;     // index into DocumentReader::files()
  int64_t line = 0;     // 1-based line of a JSON-lines file; 0 for a text file
  bool decoded = true;  // false: `text` is still the JSON line (decode() turns it into the document)
};

class DocumentReader {
 public:
  // Expands the inputs and checks that every file can be opened; errors name
  // the input (NotFound for a path that matches nothing, InvalidArgument for
  // a file named twice or a binary file).
  static absl::StatusOr<std::unique_ptr<DocumentReader>> open(const DocumentOptions& options);
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // Reads the next record into *doc; false after the last one. With decode
  // false a JSON line is left as read (doc->decoded == false). A JSON line
  // longer than 2 x max_document_bytes + 1 MiB is refused here, so that a
  // file without newlines is never held whole.
  absl::StatusOr<bool> next(Document* doc, bool decode = true);
  // Replaces a JSON line by its document (no-op when decoded); checks the
  // document's size. Thread-safe.
  absl::Status decode(Document* doc) const;

  // Number of records, by a separate scan of every file (newlines and blank
  // lines only; nothing is parsed). The reading position is not affected.
  absl::StatusOr<int64_t> count_records() const;

  // "data/a.jsonl:12" or "data/b.txt", for messages.
  std::string where(const Document& doc) const;
  const std::vector<std::string>& files() const { return files_; }
  bool is_jsonl(int32_t file) const { return jsonl_[static_cast<size_t>(file)]; }
  // Sum of the files' sizes when opened, and bytes read so far (for progress).
  int64_t total_bytes() const { return total_bytes_; }
  int64_t bytes_read() const { return bytes_read_; }
  // "2 JSON-lines files (field \"text\") and 1 text file, 12345 bytes"
  std::string describe() const;
  const DocumentOptions& options() const { return options_; }

 private:
  DocumentReader() = default;
  absl::Status open_file(size_t file);
  // One line of the open JSON-lines file into *line; false at its end.
  absl::StatusOr<bool> read_line(std::string* line);

  DocumentOptions options_;
  std::vector<std::string> files_;
  std::vector<bool> jsonl_;
  int64_t total_bytes_ = 0;
  int64_t bytes_read_ = 0;
  int64_t next_record_ = 0;
  size_t file_ = 0;      // the file being read
  int fd_ = -1;          // its descriptor (JSON lines only)
  int64_t line_ = 0;     // lines of it read so far
  std::string buffer_;   // bytes read from fd_ and not yet returned, from buffer_pos_
  size_t buffer_pos_ = 0;
  bool file_eof_ = false;
};

// A deterministic train/val split over records: of `records` records,
// exactly `val_records` go to validation, one chosen by hash of (seed,
// stretch) in each of val_records equal stretches of the record order, so
// validation is spread over the whole input (not one end of it) and does not
// depend on thread count or shard size.
struct DocumentSplit {
  int64_t records = 0;
  int64_t val_records = 0;  // <= records
  uint64_t seed = 0;
  bool is_val(int64_t record) const;
};

}  // namespace zero
