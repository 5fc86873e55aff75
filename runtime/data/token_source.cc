// Text-byte, llm.c and in-memory token sources, and the shard writer; see
// token_source.h, and docs/data-format.md for the shard layout. Shards are
// little-endian on disk and are read and written as host integers, hence the
// static_assert below.
#include "runtime/data/token_source.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/status.h"
#include "core/errno_status.h"
#include "core/strings.h"

namespace zero {

static_assert(std::endian::native == std::endian::little,
              "llm.c token shards are little-endian; this reader and writer use host byte order");

namespace fs = std::filesystem;

absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("data.path is not set: name a file, directory or glob");
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (entry.is_regular_file(ec)) files.push_back(entry.path().string());
    }
  } else if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g;
    if (::glob(path.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (fs::is_regular_file(g.gl_pathv[i], ec)) files.push_back(g.gl_pathv[i]);
      }
    }
    globfree(&g);
  } else if (fs::exists(path, ec)) {
    if (!fs::is_regular_file(path, ec)) return absl::InvalidArgumentError(cat("data file ", path, ": not a regular file"));
    files.push_back(path);
  } else {
    return absl::NotFoundError(cat("data path ", path, ": no such file or directory"));
  }
  if (files.empty()) return absl::NotFoundError(cat("data path ", path, ": matches no files"));
  std::sort(files.begin(), files.end());
  return files;
}

namespace {

// The two kinds of llm.c shard, told apart by header[0].
struct ShardFormat {
  int32_t magic;
  int32_t version;
  int64_t token_bytes;
  const char* width;   // "16-bit", for messages
  const char* header;  // llm.c's name for it, for messages
};
constexpr ShardFormat kFormatU16{kLlmcMagicU16, kLlmcVersionU16, 2, "16-bit", "GPT-2"};
constexpr ShardFormat kFormatU32{kLlmcMagicU32, kLlmcVersionU32, 4, "32-bit", "Llama-3"};

const ShardFormat* format_of_magic(int32_t magic) {
  if (magic == kLlmcMagicU16) return &kFormatU16;
  if (magic == kLlmcMagicU32) return &kFormatU32;
  return nullptr;
}

class TextBytes final : public TokenSource {
 public:
  std::vector<std::string> docs;
  std::vector<std::string> names;
  int64_t num_sequences() const override { return static_cast<int64_t>(docs.size()); }
  int64_t sequence_length(int64_t s) const override { return static_cast<int64_t>(docs[s].size()); }
  absl::Status read(int64_t s, int64_t offset, int64_t n, int32_t* out) const override {
    const auto* p = reinterpret_cast<const unsigned char*>(docs[s].data()) + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
    return absl::OkStatus();
  }
  int64_t vocab_bound() const override { return 256; }
  int64_t declared_vocab() const override { return 256; }
  std::string describe() const override {
    int64_t total = 0;
    for (const auto& d : docs) total += static_cast<int64_t>(d.size());
    return cat(docs.size(), " text files, ", total, " bytes (tokens = bytes, vocabulary 256)");
  }
};

// One llm.c shard, open for pread.
struct Shard {
  std::string path;
  int fd = -1;
  int64_t ntok = 0;
  int64_t declared_vocab = 0;  // header[3]; 0 = not declared
  const ShardFormat* format = nullptr;
};

// Reads bytes [offset, offset + bytes) of a shard; a short read means the
// file is shorter than it was when it was checked.
absl::Status pread_all(const Shard& s, void* dst, int64_t bytes, int64_t offset) {
  auto* p = static_cast<char*>(dst);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t r = ::pread(s.fd, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::DataLossError(cat("data file ", s.path, ": read at byte ", offset + done, " failed: ",
                                              std::strerror(errno)));
    if (r == 0) {
      struct stat st {};
      ::fstat(s.fd, &st);
      const int64_t was = s.format ? kLlmcHeaderBytes + s.format->token_bytes * s.ntok : kLlmcHeaderBytes;
      return absl::DataLossError(cat("data file ", s.path, ": bytes [", offset + done, ", ", offset + bytes,
                                     ") are past its end: it is now ", st.st_size, " bytes, but was ", was,
                                     " when the run opened it (truncated while training reads it?)"));
    }
    done += r;
  }
  return absl::OkStatus();
}

// Tokens [first, first + n) of a shard as int32, each checked against
// vocab_size; `hint` ends the message for an id out of range.
template <typename T>
absl::Status read_tokens_as(const Shard& s, int64_t first, int64_t n, int64_t vocab_size, const char* hint,
                            int32_t* out) {
  std::vector<T> raw(static_cast<size_t>(n));
  ZE_RETURN_IF_ERROR(pread_all(s, raw.data(), n * static_cast<int64_t>(sizeof(T)),
                               kLlmcHeaderBytes + first * static_cast<int64_t>(sizeof(T))));
  for (int64_t i = 0; i < n; ++i) {
    const T t = raw[static_cast<size_t>(i)];
    if (static_cast<int64_t>(t) >= vocab_size) {
      return absl::InvalidArgumentError(cat("data file ", s.path, ": token ", t, " at position ", first + i,
                                            " is >= model.vocab_size ", vocab_size, hint));
    }
    out[i] = static_cast<int32_t>(t);
  }
  return absl::OkStatus();
}

absl::Status read_tokens(const Shard& s, int64_t first, int64_t n, int64_t vocab_size, const char* hint,
                         int32_t* out) {
  return s.format->token_bytes == 2 ? read_tokens_as<uint16_t>(s, first, n, vocab_size, hint, out)
                                    : read_tokens_as<uint32_t>(s, first, n, vocab_size, hint, out);
}

constexpr const char* kOpenVocabHint =
    " (tokenized for a larger vocabulary than the model's? tokenize with the model's own tokenizer)";

class LlmcShards final : public TokenSource {
 public:
  std::vector<Shard> shards;
  int64_t vocab_size = 0;
  int64_t max_token = 0;
  ~LlmcShards() override {
    for (Shard& s : shards)
      if (s.fd >= 0) ::close(s.fd);
  }
  int64_t num_sequences() const override { return static_cast<int64_t>(shards.size()); }
  int64_t sequence_length(int64_t s) const override { return shards[s].ntok; }
  // Every token was checked when the file was opened; checking again costs
  // little and keeps a file rewritten under the run from indexing past the
  // embedding table.
  absl::Status read(int64_t s, int64_t offset, int64_t n, int32_t* out) const override {
    const absl::Status st = read_tokens(shards[s], offset, n, vocab_size,
                                        ", but every token was below it when the run opened the file "
                                        "(rewritten while training reads it?)",
                                        out);
    return st.ok() || absl::IsDataLoss(st) ? st : absl::DataLossError(st.message());
  }
  int64_t vocab_bound() const override { return max_token + 1; }
  int64_t declared_vocab() const override {
    for (const Shard& s : shards)
      if (s.declared_vocab != shards[0].declared_vocab) return -1;
    return shards.empty() ? 0 : shards[0].declared_vocab;
  }
  std::vector<int64_t> declared_vocabs() const override {
    std::vector<int64_t> out;
    for (const Shard& s : shards) {
      if (std::find(out.begin(), out.end(), s.declared_vocab) == out.end()) out.push_back(s.declared_vocab);
    }
    return out;
  }
  std::string describe() const override {
    int64_t total = 0;
    for (const auto& s : shards) total += s.ntok;
    const char* width = shards.empty() ? "no" : shards[0].format->width;
    std::string text = cat(shards.size(), " llm.c shard", shards.size() == 1 ? "" : "s", " (", width, " tokens), ",
                           total, " tokens");
    const int64_t declared = declared_vocab();
    if (declared > 0) text += cat(", written for a vocabulary of ", declared);
    if (declared < 0) {
      const Shard& other = *std::find_if(shards.begin(), shards.end(), [&](const Shard& s) {
        return s.declared_vocab != shards[0].declared_vocab;
      });
      text += cat(", written for different vocabularies (", shards[0].path, ": ", shards[0].declared_vocab, ", ",
                  other.path, ": ", other.declared_vocab, "; 0 = not recorded)");
    }
    return text;
  }
};

// Opens one shard and validates it: size, then header[0] magic, header[1]
// version, header[2] token count against the exact size, header[3] declared
// vocabulary (not negative), then every token.
absl::Status open_shard(const std::string& path, int64_t vocab_size, Shard& s, int64_t& max_token) {
  s.path = path;
  s.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s.fd < 0 && (errno == EMFILE || errno == ENFILE)) {
    return absl::ResourceExhaustedError(cat("data file ", path, ": cannot open: ", std::strerror(errno),
                                            " (every shard stays open for the run; raise the limit with ulimit -n)"));
  }
  if (s.fd < 0) return absl::NotFoundError(cat("data file ", path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (fstat(s.fd, &st) != 0) {
    return absl::InternalError(cat("data file ", path, ": stat failed: ", std::strerror(errno)));
  }
  const int64_t size = st.st_size;
  if (size < kLlmcHeaderBytes) {
    return absl::InvalidArgumentError(cat("data file ", path, ": ", size,
                                          " bytes is shorter than the 1024-byte llm.c header; is it an llm.c token shard?"));
  }
  int32_t header[kLlmcHeaderBytes / 4];
  ZE_RETURN_IF_ERROR(pread_all(s, header, kLlmcHeaderBytes, 0));
  s.format = format_of_magic(header[0]);
  if (s.format == nullptr) {
    return absl::InvalidArgumentError(
        cat("data file ", path, ": bad magic ", header[0], " in header[0] (bytes 0-3), expected ", kLlmcMagicU16,
            " (16-bit tokens) or ", kLlmcMagicU32, " (32-bit tokens); is it an llm.c token shard, "
            "*_train.bin / *_val.bin? set data.format to \"text\" for raw text"));
  }
  if (header[1] != s.format->version) {
    return absl::InvalidArgumentError(cat("data file ", path, ": bad version ", header[1],
                                          " in header[1] (bytes 4-7), expected ", s.format->version, " for magic ",
                                          s.format->magic, " (llm.c ", s.format->header, " header, ",
                                          s.format->width, " tokens)"));
  }
  const int64_t ntok = header[2];
  if (ntok < 0) {
    return absl::InvalidArgumentError(cat("data file ", path, ": bad token count ", ntok,
                                          " in header[2] (bytes 8-11): it is negative (corrupt header?)"));
  }
  const int64_t expected = kLlmcHeaderBytes + s.format->token_bytes * ntok;
  if (size != expected) {
    return absl::InvalidArgumentError(cat("data file ", path, ": header says ", ntok, " tokens, so the file should be ",
                                          expected, " bytes, but it is ", size, " bytes (the count is header[2], bytes "
                                          "8-11, of ", s.format->token_bytes, "-byte tokens; truncated or corrupt?)"));
  }
  s.ntok = ntok;
  s.declared_vocab = header[3];
  if (s.declared_vocab < 0) {
    return absl::InvalidArgumentError(cat("data file ", path, ": bad vocabulary size ", s.declared_vocab,
                                          " in header[3] (bytes 12-15): it is negative (corrupt header?)"));
  }
  std::vector<int32_t> chunk(size_t{1} << 20);
  for (int64_t first = 0; first < ntok; first += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), ntok - first);
    ZE_RETURN_IF_ERROR(read_tokens(s, first, n, vocab_size, kOpenVocabHint, chunk.data()));
    max_token = std::max<int64_t>(max_token, *std::max_element(chunk.begin(), chunk.begin() + n));
  }
  return absl::OkStatus();
}


absl::Status write_all(int fd, const void* data, size_t bytes, const std::string& tmp) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno_status(errno, cat("writing ", tmp));
    p += w;
    bytes -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

// Writes header and tokens of `format` to a temporary name beside `path`,
// fsyncs, renames over `path` and fsyncs the directory. encode(first, n, dst)
// stores tokens [first, first + n) in the format's width at dst;
// declared_vocab goes into header[3] (0: not known).
template <typename Encode>
absl::Status write_shard(const std::string& path, const ShardFormat& format, int64_t ntok, int32_t declared_vocab,
                         Encode encode) {
  if (ntok > INT32_MAX) {
    return absl::InvalidArgumentError(cat("writing ", path, ": ", ntok, " tokens do not fit the llm.c header's int32 "
                                          "count (at most 2147483647 per shard): split them across shards"));
  }
  // Unique per process and call, so two writers never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = cat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, cat("creating ", tmp));
  int32_t header[kLlmcHeaderBytes / 4] = {};
  header[0] = format.magic;
  header[1] = format.version;
  header[2] = static_cast<int32_t>(ntok);
  header[3] = declared_vocab;
  absl::Status st = write_all(fd, header, sizeof(header), tmp);
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<char> buf(static_cast<size_t>(std::min(ntok, kChunk) * format.token_bytes));
  for (int64_t first = 0; st.ok() && first < ntok; first += kChunk) {
    const int64_t n = std::min(kChunk, ntok - first);
    encode(first, n, buf.data());
    st = write_all(fd, buf.data(), static_cast<size_t>(n * format.token_bytes), tmp);
  }
  if (st.ok() && ::fsync(fd) != 0) st = errno_status(errno, cat("syncing ", tmp));
  if (::close(fd) != 0 && st.ok()) st = errno_status(errno, cat("closing ", tmp));
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = errno_status(errno, cat("renaming ", tmp, " to ", path));
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno_status(errno, cat("opening directory ", dir, " to sync it"));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return errno_status(err, cat("syncing directory ", dir));
  return absl::OkStatus();
}

class MemoryTokens final : public TokenSource {
 public:
  MemoryTokens(std::vector<int32_t> tokens, int64_t vocab_size, std::string description)
      : tokens_(std::move(tokens)), vocab_size_(vocab_size), description_(std::move(description)) {
    for (int32_t t : tokens_) max_token_ = std::max<int64_t>(max_token_, t);
  }
  int64_t num_sequences() const override { return 1; }
  int64_t sequence_length(int64_t) const override { return static_cast<int64_t>(tokens_.size()); }
  absl::Status read(int64_t, int64_t offset, int64_t n, int32_t* out) const override {
    std::copy_n(tokens_.begin() + offset, n, out);
    return absl::OkStatus();
  }
  int64_t vocab_bound() const override { return max_token_ + 1; }
  int64_t declared_vocab() const override { return vocab_size_; }
  std::string describe() const override { return description_; }

 private:
  std::vector<int32_t> tokens_;
  int64_t vocab_size_;
  std::string description_;
  int64_t max_token_ = 0;
};

}  // namespace

std::unique_ptr<TokenSource> make_memory_tokens(std::vector<int32_t> tokens, int64_t vocab_size,
                                                std::string description) {
  return std::make_unique<MemoryTokens>(std::move(tokens), vocab_size, std::move(description));
}

absl::StatusOr<std::unique_ptr<TokenSource>> open_text_bytes(const std::string& path) {
  ZE_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_data_path(path));
  auto src = std::make_unique<TextBytes>();
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return absl::NotFoundError(cat("data file ", f, ": cannot open"));
    // No text starts with a magic's bytes (88 D8 34 01 or A1 D9 34 01: a
    // UTF-8 continuation byte first, a control byte fourth); checked before
    // reading a possibly large shard whole.
    int32_t magic = 0;
    in.read(reinterpret_cast<char*>(&magic), sizeof(magic));
    if (in.gcount() == sizeof(magic)) {
      if (const ShardFormat* format = format_of_magic(magic)) {
        return absl::InvalidArgumentError(cat("data file ", f, ": is an llm.c token shard (magic ", magic, ": llm.c ",
                                              format->header, " header, ", format->width, " tokens), not text; "
                                              "reading its token ids as bytes would train on the wrong tokens. "
                                              "Set data.format to \"llmc\" (--set data.format=llmc)"));
      }
    }
    in.clear();
    in.seekg(0);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return absl::DataLossError(cat("data file ", f, ": read failed"));
    if (content.empty()) continue;
    src->docs.push_back(std::move(content));
    src->names.push_back(f);
  }
  if (src->docs.empty()) return absl::InvalidArgumentError(cat("data path ", path, ": every file is empty"));
  return std::unique_ptr<TokenSource>(std::move(src));
}

absl::StatusOr<std::unique_ptr<TokenSource>> open_llmc_shards(const std::string& path, int64_t vocab_size) {
  ZE_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_data_path(path));
  auto src = std::make_unique<LlmcShards>();
  src->vocab_size = vocab_size;
  src->shards.resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    ZE_RETURN_IF_ERROR(open_shard(files[i], vocab_size, src->shards[i], src->max_token));
    const Shard& first = src->shards[0];
    if (src->shards[i].format != first.format) {
      const ShardFormat& a = *first.format;
      const ShardFormat& b = *src->shards[i].format;
      return absl::InvalidArgumentError(cat("data path ", path, ": ", first.path, " has ", a.width, " tokens (llm.c ",
                                            a.header, " header) but ", files[i], " has ", b.width, " tokens (llm.c ",
                                            b.header, " header); two token widths mean two tokenizers, so one path "
                                            "may hold only one (tokenize all of it with the model's tokenizer)"));
    }
  }
  return std::unique_ptr<TokenSource>(std::move(src));
}

absl::Status write_token_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    return absl::InvalidArgumentError(cat("writing ", path, ": vocabulary size ", vocab_size,
                                          " must be in [1, 2147483647] (it goes into header[3], an int32)"));
  }
  const auto declared = static_cast<int32_t>(vocab_size);
  // Every id is checked before a byte is written: below, a 16-bit shard is
  // only chosen for vocab_size <= 65535, so the narrowing cast cannot truncate.
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(cat("writing ", path, ": token ", tokens[i], " at position ", i,
                                            " is outside the vocabulary [0, ", vocab_size, "); nothing was written"));
    }
  }
  const int64_t ntok = static_cast<int64_t>(tokens.size());
  if (vocab_size <= kLlmcMaxVocabU16) {
    return write_shard(path, kFormatU16, ntok, declared, [&](int64_t first, int64_t n, char* dst) {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>(tokens[static_cast<size_t>(first + i)]);
    });
  }
  return write_shard(path, kFormatU32, ntok, declared, [&](int64_t first, int64_t n, char* dst) {
    auto* out = reinterpret_cast<uint32_t*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(tokens[static_cast<size_t>(first + i)]);
  });
}

absl::Status write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  const auto ntok = static_cast<int64_t>(tokens.size());
  return write_shard(path, kFormatU16, ntok, /*declared_vocab=*/0, [&](int64_t first, int64_t n, char* dst) {
    std::memcpy(dst, tokens.data() + first, static_cast<size_t>(n) * sizeof(uint16_t));
  });
}

}  // namespace zero
