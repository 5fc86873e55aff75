// zero-data: prepares training data as llm.c token shards
// (docs/data-format.md).
//
//   zero-data tokenize --tokenizer DIR --input PATH... --out PREFIX
//   zero-data bytes-to-llmc --input PATH --out FILE
//
// tokenize: text files and JSON lines (runtime/data/documents.h) through a
// Hugging Face tokenizer on several threads (runtime/data/tokenize_documents.h),
// each document followed by eos, split into train and val by record
// (DocumentSplit) and written as PREFIX_train_NNNNNN.bin / PREFIX_val_NNNNNN.bin,
// shards cut at document boundaries. Every shard is staged under a
// temporary name and renamed only once the whole input has been read, so a
// failed run leaves the previous outputs as they were; a successful one
// removes the previous run's higher-numbered shards of the same PREFIX.
// bytes-to-llmc: every file's bytes become tokens 0..255, files separated by
// token 0 (NUL never occurs in text, so it marks the document boundary).
//
// Each subcommand is a class holding its options (add_to, chosen, run); main
// only registers and dispatches, so a new subcommand is one more of each.
// `zero-data SUBCOMMAND --help` prints its usage (runtime/tools/cli.h).
// Exit status: 0 written; 1 an I/O failure (named); 2 bad usage or bad
// input (an empty dataset, a malformed JSON line, a document over the limit,
// a tokenizer that cannot be read).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/strings.h"
#include "runtime/tools/durations.h"
#include "runtime/data/documents.h"
#include "runtime/data/token_source.h"
#include "runtime/data/tokenize_documents.h"
#include "runtime/data/tokenizer.h"
#include "runtime/tools/cli.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: zero-data tokenize --tokenizer DIR --input PATH... --out PREFIX [options]\n"
    "       zero-data bytes-to-llmc --input PATH --out FILE\n"
    "\n"
    "Prepares training data in llm.c's token-shard format; `zero-data SUBCOMMAND --help` for each.\n";

constexpr const char* kTokenizeUsage =
    "usage: zero-data tokenize --tokenizer DIR --input PATH... --out PREFIX [--format auto|text|jsonl]\n"
    "         [--jsonl-field F] [--val-fraction F | --val-documents N] [--seed N] [--threads N]\n"
    "         [--shard-tokens N] [--max-document-bytes N] [--eos-id ID]\n"
    "\n"
    "Tokenizes text files (one file, one document) and JSON lines (one line, one document: its field F)\n"
    "with the Hugging Face tokenizer in DIR, each document followed by the tokenizer's eos token, and\n"
    "writes PREFIX_train_000000.bin ... and PREFIX_val_000000.bin (docs/data-format.md).\n";

constexpr const char* kBytesUsage =
    "usage: zero-data bytes-to-llmc --input PATH --out FILE\n"
    "\n"
    "Writes the bytes of every file under PATH (a file, a directory or a glob) as an llm.c token shard\n"
    "(vocabulary 256), each file preceded by token 0 (NUL, the document boundary).\n";

// Prints "zero-data: <message>" and returns `exit_code`.
int fail(const absl::Status& st, int exit_code = 1) {
  std::fprintf(stderr, "zero-data: %s\n", std::string(st.message()).c_str());
  return exit_code;
}

// Bad input (exit 2) or an I/O failure (exit 1), by the kind of error.
int input_exit_code(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 2;
    default: return 1;
  }
}

// 12345678 -> "12.3M"; for counts and rates.
std::string brief(double v) {
  if (v >= 1e9) return absl::StrFormat("%.2fG", v / 1e9);
  if (v >= 1e6) return absl::StrFormat("%.2fM", v / 1e6);
  if (v >= 1e3) return absl::StrFormat("%.1fk", v / 1e3);
  return absl::StrFormat("%.0f", v);
}

// "1 document", "2 documents".
std::string counted(int64_t n, const char* noun) { return zero::cat(n, " ", noun, n == 1 ? "" : "s"); }

// Progress on stderr: a bar redrawn in place when stderr is a terminal, a
// plain line every kLinePeriod otherwise (a log file gets no carriage returns).
class ProgressDisplay {
 public:
  explicit ProgressDisplay(int64_t total_bytes) : tty_(::isatty(STDERR_FILENO) == 1), total_bytes_(total_bytes) {}

  void update(int64_t bytes, int64_t documents, int64_t tokens) {
    const Clock::time_point now = Clock::now();
    if (now - last_ < (tty_ ? kBarPeriod : kLinePeriod)) return;
    last_ = now;
    print(bytes, documents, tokens);
  }
  // The bar at its final state, and the end of its line.
  void finish(int64_t bytes, int64_t documents, int64_t tokens) {
    if (!tty_) return;
    print(bytes, documents, tokens);
    std::fputc('\n', stderr);
  }

 private:
  static constexpr std::chrono::milliseconds kBarPeriod{200};
  static constexpr std::chrono::seconds kLinePeriod{10};

  void print(int64_t bytes, int64_t documents, int64_t tokens) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const double done = total_bytes_ > 0 ? std::min(1.0, static_cast<double>(bytes) / total_bytes_) : 1.0;
    const double eta = done > 0 ? elapsed * (1 - done) / done : NAN;
    const std::string status = absl::StrFormat(
        "%3.0f%% %sB/%sB | %s docs | %s tokens | %s tokens/s | ETA %s", 100 * done, brief(bytes), brief(total_bytes_),
        brief(documents), brief(tokens), brief(elapsed > 0 ? tokens / elapsed : 0), zero::format_duration(eta));
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(done * kWidth);
      std::fprintf(stderr, "\r[%s%s] %s\x1b[K", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, '.').c_str(), status.c_str());
    } else {
      std::fprintf(stderr, "zero-data: tokenizing: %s\n", status.c_str());
    }
    std::fflush(stderr);
  }

  bool tty_;
  int64_t total_bytes_;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

// The shards of one split: documents accumulate until the next one would
// take the shard past shard_tokens (a longer document gets a shard of its
// own); each full shard is written at once under a staging name, and
// commit() renames them all.
class ShardSeries {
 public:
  ShardSeries(std::string prefix, std::string split, int64_t shard_tokens, int64_t vocab_size)
      : prefix_(std::move(prefix)), split_(std::move(split)), shard_tokens_(shard_tokens), vocab_size_(vocab_size) {}
  ~ShardSeries() { discard(); }

  absl::Status add(std::span<const int32_t> ids) {
    if (!tokens_.empty() && static_cast<int64_t>(tokens_.size() + ids.size()) > shard_tokens_) {
      if (absl::Status st = flush(); !st.ok()) return st;
    }
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    ++documents_;
    total_tokens_ += static_cast<int64_t>(ids.size());
    return absl::OkStatus();
  }
  absl::Status finish() { return tokens_.empty() ? absl::OkStatus() : flush(); }

  // Renames every staged shard to its name.
  absl::Status commit() {
    for (size_t i = 0; i < staged_.size(); ++i) {
      if (::rename(staged_[i].c_str(), names_[i].c_str()) != 0) {
        return absl::InternalError(zero::cat("renaming ", staged_[i], " to ", names_[i], ": ", std::strerror(errno)));
      }
    }
    staged_.clear();
    return absl::OkStatus();
  }
  // Removes the staged shards (after a failure).
  void discard() {
    for (const std::string& s : staged_) ::unlink(s.c_str());
    staged_.clear();
  }

  // The previous run's shards of this split numbered from names().size() on;
  // removes them and returns their names.
  std::vector<std::string> remove_stale() const {
    std::vector<std::string> removed;
    const fs::path prefix(prefix_);
    const fs::path dir = prefix.has_parent_path() ? prefix.parent_path() : fs::path(".");
    const std::string stem = zero::cat(prefix.filename().string(), "_", split_, "_");
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() != stem.size() + 10 || name.compare(0, stem.size(), stem) != 0 ||
          name.compare(stem.size() + 6, 4, ".bin") != 0) {
        continue;
      }
      const std::string digits = name.substr(stem.size(), 6);
      if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
      if (std::stoll(digits) < static_cast<int64_t>(names_.size())) continue;
      if (fs::remove(entry.path(), ec)) removed.push_back(entry.path().string());
    }
    std::sort(removed.begin(), removed.end());
    return removed;
  }

  int64_t documents() const { return documents_; }
  int64_t tokens() const { return total_tokens_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::string& split() const { return split_; }

 private:
  absl::Status flush() {
    const std::string name = absl::StrFormat("%s_%s_%06d.bin", prefix_, split_, names_.size());
    const std::string staged = zero::cat(name, ".partial.", ::getpid());
    if (absl::Status st = zero::write_token_shard(staged, tokens_, vocab_size_); !st.ok()) return st;
    names_.push_back(name);
    staged_.push_back(staged);
    tokens_.clear();
    return absl::OkStatus();
  }

  std::string prefix_, split_;
  int64_t shard_tokens_, vocab_size_;
  std::vector<int32_t> tokens_;  // the shard being filled
  std::vector<std::string> names_, staged_;
  int64_t documents_ = 0, total_tokens_ = 0;
};

// fsync of a directory, so the renames in it survive a crash.
absl::Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(zero::cat("opening directory ", dir, ": ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return absl::InternalError(zero::cat("syncing directory ", dir, ": ", std::strerror(err)));
  return absl::OkStatus();
}

// zero-data tokenize: documents through a tokenizer into train/val shards.
class Tokenize {
 public:
  void add_to(CLI::App& app) {
    cmd_ = app.add_subcommand("tokenize", "text files or JSON lines through a tokenizer into train/val token shards");
    zero::cli::set_usage(*cmd_, kTokenizeUsage);
    cmd_->add_option("--tokenizer", tokenizer_, "a model directory with tokenizer.json or tokenizer.model")
        ->type_name("DIR")
        ->required()
        ->take_last();
    cmd_->add_option("--input", inputs_, "files, directories or glob patterns (repeatable)")
        ->type_name("PATH")
        ->required()
        ->expected(1, -1);
    cmd_->add_option("--out", out_, "shard name prefix: PREFIX_train_000000.bin, PREFIX_val_000000.bin")
        ->type_name("PREFIX")
        ->required()
        ->take_last();
    cmd_->add_option("--format", format_, "auto (*.jsonl, *.ndjson, *.json are JSON lines), text or jsonl")
        ->check(CLI::IsMember({"auto", "text", "jsonl"}))
        ->capture_default_str()
        ->take_last();
    cmd_->add_option("--jsonl-field", field_, "the field of each JSON line that holds the document")
        ->type_name("F")
        ->capture_default_str()
        ->take_last();
    CLI::Option* fraction =
        cmd_->add_option("--val-fraction", val_fraction_, "share of the documents for validation (rounded up)")
            ->check(CLI::Range(0.0, 0.999999))
            ->capture_default_str()
            ->take_last();
    cmd_->add_option("--val-documents", val_documents_, "exactly N documents for validation")
        ->type_name("N")
        ->check(CLI::NonNegativeNumber)
        ->excludes(fraction)
        ->take_last();
    cmd_->add_option("--seed", seed_, "picks the validation documents")->capture_default_str()->take_last();
    cmd_->add_option("--threads", threads_, "tokenizer threads")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str()
        ->take_last();
    cmd_->add_option("--shard-tokens", shard_tokens_, "tokens per shard; shards end at a document boundary")
        ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}))
        ->capture_default_str()
        ->take_last();
    cmd_->add_option("--max-document-bytes", max_document_bytes_, "a longer document is an error")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
        ->capture_default_str()
        ->take_last();
    eos_option_ = cmd_->add_option("--eos-id", eos_id_,
                                   "the separator after each document (default: the tokenizer's eos_token)")
                      ->type_name("ID")
                      ->take_last();
  }
  bool chosen() const { return cmd_ != nullptr && cmd_->parsed(); }

  int run() {
    const fs::path prefix(out_);
    std::error_code ec;
    if (out_.empty() || out_.back() == '/' || fs::is_directory(prefix, ec)) {
      return zero::cli::usage_error(*cmd_, zero::cat("--out ", out_, " names a directory; give a file-name prefix: "
                                                     "--out DIR/NAME writes DIR/NAME_train_000000.bin"));
    }
    absl::StatusOr<std::unique_ptr<zero::Tokenizer>> tokenizer = zero::load_tokenizer(tokenizer_);
    if (!tokenizer.ok()) return fail(tokenizer.status(), 2);
    std::optional<int32_t> eos_override;
    if (eos_option_->count() > 0) eos_override = eos_id_;
    absl::StatusOr<zero::DocumentFraming> framing = zero::document_framing(**tokenizer, eos_override);
    if (!framing.ok()) return fail(framing.status(), 2);

    zero::DocumentOptions options;
    options.inputs = inputs_;
    options.format = format_ == "text"    ? zero::DocumentFormat::kText
                     : format_ == "jsonl" ? zero::DocumentFormat::kJsonl
                                          : zero::DocumentFormat::kAuto;
    options.jsonl_field = field_;
    options.max_document_bytes = max_document_bytes_;
    absl::StatusOr<std::unique_ptr<zero::DocumentReader>> reader = zero::DocumentReader::open(options);
    if (!reader.ok()) return fail(reader.status(), input_exit_code(reader.status()));

    const absl::StatusOr<zero::DocumentSplit> split = choose_split(**reader);
    if (!split.ok()) return fail(split.status(), input_exit_code(split.status()));

    if (prefix.has_parent_path() && !fs::create_directories(prefix.parent_path(), ec) && ec) {
      return fail(absl::InternalError(
          zero::cat("creating directory ", prefix.parent_path().string(), ": ", ec.message())));
    }
    const int64_t vocab_size = (*tokenizer)->vocab_size();
    ShardSeries train(out_, "train", shard_tokens_, vocab_size), val(out_, "val", shard_tokens_, vocab_size);
    ProgressDisplay progress((*reader)->total_bytes());
    bool write_failed = false;
    int64_t documents = 0, tokens = 0;
    const Clock::time_point start = Clock::now();
    const absl::StatusOr<zero::TokenizeStats> stats = zero::tokenize_documents(
        **tokenizer, *framing, **reader, threads_, [&](const zero::Document& doc, std::span<const int32_t> ids) {
          const absl::Status st = (split->is_val(doc.record) ? val : train).add(ids);
          write_failed = !st.ok();
          progress.update((*reader)->bytes_read(), ++documents, tokens += static_cast<int64_t>(ids.size()));
          return st;
        });
    if (!stats.ok()) return fail(stats.status(), write_failed ? 1 : input_exit_code(stats.status()));
    progress.finish((*reader)->bytes_read(), documents, tokens);
    if (train.documents() == 0) {
      return fail(absl::InvalidArgumentError(zero::cat(
                      "no training documents: every non-empty document of ", (*reader)->describe(),
                      " fell to validation; lower --val-fraction or --val-documents")),
                  2);
    }
    for (ShardSeries* s : {&train, &val}) {
      if (const absl::Status st = s->finish(); !st.ok()) return fail(st);
    }
    for (ShardSeries* s : {&train, &val}) {
      if (const absl::Status st = s->commit(); !st.ok()) return fail(st);
    }
    const std::string dir = prefix.has_parent_path() ? prefix.parent_path().string() : ".";
    if (const absl::Status st = sync_directory(dir); !st.ok()) return fail(st);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    print_summary(**tokenizer, *framing, **reader, *stats, seconds);
    for (const ShardSeries* s : {&train, &val}) {
      std::printf("%s: %s, %s:", s->split().c_str(), counted(s->documents(), "document").c_str(),
                  counted(s->tokens(), "token").c_str());
      for (const std::string& name : s->names()) std::printf(" %s", name.c_str());
      if (s->names().empty()) std::printf(" no file");
      std::printf("\n");
      for (const std::string& stale : s->remove_stale()) std::printf("removed %s (an earlier run's)\n", stale.c_str());
    }
    return 0;
  }

 private:
  // --val-documents N, or ceil(--val-fraction x records) leaving one for
  // training; counting the records takes a pass over the files.
  absl::StatusOr<zero::DocumentSplit> choose_split(const zero::DocumentReader& reader) const {
    zero::DocumentSplit split;
    split.seed = seed_;
    if (val_documents_ == 0 || (val_documents_ < 0 && val_fraction_ == 0)) return split;
    ZE_ASSIGN_OR_RETURN(split.records, reader.count_records());
    if (val_documents_ > 0) {
      if (val_documents_ >= split.records) {
        return absl::InvalidArgumentError(zero::cat("--val-documents ", val_documents_,
                                                    " leaves no training documents: the input holds ", split.records,
                                                    " records (", reader.describe(), ")"));
      }
      split.val_records = val_documents_;
    } else {
      const auto wanted = static_cast<int64_t>(std::ceil(val_fraction_ * static_cast<double>(split.records)));
      split.val_records = std::max<int64_t>(0, std::min(wanted, split.records - 1));
    }
    return split;
  }

  void print_summary(const zero::Tokenizer& tokenizer, const zero::DocumentFraming& framing,
                     const zero::DocumentReader& reader, const zero::TokenizeStats& stats, double seconds) const {
    std::printf("tokenized %s", counted(stats.documents, "document").c_str());
    if (stats.empty_documents > 0) std::printf(" (%s skipped)", counted(stats.empty_documents, "empty one").c_str());
    std::printf(" from %s: %lld tokens in %.2f s, %s tokens/s, %s bytes/s (%d thread%s)\n", reader.describe().c_str(),
                static_cast<long long>(stats.tokens), seconds, brief(stats.tokens / seconds).c_str(),
                brief(static_cast<double>(reader.bytes_read()) / seconds).c_str(), threads_, threads_ == 1 ? "" : "s");
    const int64_t vocab_size = tokenizer.vocab_size();
    std::printf("each document: %s (tokenizer %s, %lld ids: %d-bit shards, header[3] = %lld)\n",
                zero::describe_framing(tokenizer, framing).c_str(), tokenizer_.c_str(),
                static_cast<long long>(vocab_size), vocab_size <= zero::kLlmcMaxVocabU16 ? 16 : 32,
                static_cast<long long>(vocab_size));
  }

  CLI::App* cmd_ = nullptr;
  std::string tokenizer_, out_, format_ = "auto", field_ = "text";
  std::vector<std::string> inputs_;
  double val_fraction_ = 0.01;
  int64_t val_documents_ = -1;  // -1: not given (use --val-fraction)
  uint64_t seed_ = 0;
  int threads_ = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t shard_tokens_ = 100'000'000;
  int64_t max_document_bytes_ = zero::kDefaultMaxDocumentBytes;
  CLI::Option* eos_option_ = nullptr;
  int32_t eos_id_ = -1;
};

// zero-data bytes-to-llmc: one 16-bit shard (vocabulary 256) from text files.
class BytesToLlmc {
 public:
  void add_to(CLI::App& app) {
    cmd_ = app.add_subcommand("bytes-to-llmc", "bytes of text files as an llm.c token shard (vocabulary 256)");
    zero::cli::set_usage(*cmd_, kBytesUsage);
    cmd_->add_option("--input", input_, "a file, a directory or a glob pattern")
        ->type_name("PATH")
        ->required()
        ->take_last();
    cmd_->add_option("--out", out_, "the shard to write")->type_name("FILE")->required()->take_last();
  }
  bool chosen() const { return cmd_ != nullptr && cmd_->parsed(); }

  int run() const {
    constexpr int64_t kVocabSize = 256;
    absl::StatusOr<std::unique_ptr<zero::TokenSource>> src = zero::open_text_bytes(input_);
    if (!src.ok()) return fail(src.status());
    std::vector<int32_t> tokens;
    for (int64_t s = 0; s < (*src)->num_sequences(); ++s) {
      const int64_t n = (*src)->sequence_length(s);
      tokens.push_back(0);
      const size_t at = tokens.size();
      tokens.resize(at + static_cast<size_t>(n));
      if (const absl::Status st = (*src)->read(s, 0, n, tokens.data() + at); !st.ok()) return fail(st);
    }
    if (const absl::Status st = zero::write_token_shard(out_, tokens, kVocabSize); !st.ok()) return fail(st);
    std::printf("wrote %s: %zu tokens from %s\n", out_.c_str(), tokens.size(), (*src)->describe().c_str());
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string input_, out_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  zero::cli::init_app(app, "zero-data", kUsage);
  app.require_subcommand(1);
  Tokenize tokenize;
  tokenize.add_to(app);
  BytesToLlmc bytes_to_llmc;
  bytes_to_llmc.add_to(app);
  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;
  if (tokenize.chosen()) return tokenize.run();
  if (bytes_to_llmc.chosen()) return bytes_to_llmc.run();
  return zero::cli::usage_error(app, "no subcommand given");  // unreachable: require_subcommand(1)
}
