// Text-byte and llm.c token sources; see token_source.h.
#include "runtime/data/token_source.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "core/strings.h"

namespace zero {

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
      return absl::DataLossError(cat("data file ", s.path, ": bytes [", offset + done, ", ", offset + bytes,
                                     ") are past its end: it is now ", st.st_size, " bytes, but was ",
                                     kLlmcHeaderBytes + 2 * s.ntok, " when the run opened it (truncated while training reads it?)"));
    }
    done += r;
  }
  return absl::OkStatus();
}

class LlmcShards final : public TokenSource {
 public:
  std::vector<Shard> shards;
  int64_t max_token = 0;
  ~LlmcShards() override {
    for (Shard& s : shards)
      if (s.fd >= 0) ::close(s.fd);
  }
  int64_t num_sequences() const override { return static_cast<int64_t>(shards.size()); }
  int64_t sequence_length(int64_t s) const override { return shards[s].ntok; }
  absl::Status read(int64_t s, int64_t offset, int64_t n, int32_t* out) const override {
    std::vector<uint16_t> tokens(static_cast<size_t>(n));
    ZE_RETURN_IF_ERROR(pread_all(shards[s], tokens.data(), 2 * n, kLlmcHeaderBytes + 2 * offset));
    for (int64_t i = 0; i < n; ++i) out[i] = tokens[static_cast<size_t>(i)];
    return absl::OkStatus();
  }
  int64_t vocab_bound() const override { return max_token + 1; }
  std::string describe() const override {
    int64_t total = 0;
    for (const auto& s : shards) total += s.ntok;
    return cat(shards.size(), " llm.c shard", shards.size() == 1 ? "" : "s", ", ", total, " tokens");
  }
};

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
  if (header[0] != kLlmcMagic) {
    std::string hint = header[0] == 20240801 ? " (this is llm.c's llama-3 format with uint32 tokens, which is not supported)"
                                             : " (is this an llm.c token shard, *_train.bin / *_val.bin? set data.format to \"text\" for raw text)";
    return absl::InvalidArgumentError(cat("data file ", path, ": bad magic ", header[0], ", expected ", kLlmcMagic, hint));
  }
  if (header[1] != kLlmcVersion) {
    return absl::InvalidArgumentError(cat("data file ", path, ": unsupported version ", header[1], ", expected ", kLlmcVersion));
  }
  const int64_t ntok = header[2];
  const int64_t expected = kLlmcHeaderBytes + 2 * ntok;
  if (ntok < 0 || size != expected) {
    return absl::InvalidArgumentError(cat("data file ", path, ": header says ", ntok, " tokens, so the file should be ",
                                          expected, " bytes, but it is ", size, " bytes (truncated or corrupt?)"));
  }
  s.ntok = ntok;
  // Every token against the vocabulary, a chunk at a time.
  std::vector<uint16_t> chunk(size_t{1} << 20);
  for (int64_t first = 0; first < ntok; first += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), ntok - first);
    ZE_RETURN_IF_ERROR(pread_all(s, chunk.data(), 2 * n, kLlmcHeaderBytes + 2 * first));
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t t = chunk[static_cast<size_t>(i)];
      if (t >= vocab_size) {
        return absl::InvalidArgumentError(cat("data file ", path, ": token ", t, " at position ", first + i,
                                              " is >= model.vocab_size ", vocab_size));
      }
      max_token = std::max<int64_t>(max_token, t);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenSource>> open_text_bytes(const std::string& path) {
  ZE_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_data_path(path));
  auto src = std::make_unique<TextBytes>();
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return absl::NotFoundError(cat("data file ", f, ": cannot open"));
    std::stringstream buf;
    buf << in.rdbuf();
    if (buf.str().empty()) continue;
    src->docs.push_back(buf.str());
    src->names.push_back(f);
  }
  if (src->docs.empty()) return absl::InvalidArgumentError(cat("data path ", path, ": every file is empty"));
  return std::unique_ptr<TokenSource>(std::move(src));
}

absl::StatusOr<std::unique_ptr<TokenSource>> open_llmc_shards(const std::string& path, int64_t vocab_size) {
  ZE_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_data_path(path));
  auto src = std::make_unique<LlmcShards>();
  src->shards.resize(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    ZE_RETURN_IF_ERROR(open_shard(files[i], vocab_size, src->shards[i], src->max_token));
  }
  return std::unique_ptr<TokenSource>(std::move(src));
}

absl::Status write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(cat(path, ": ", tokens.size(), " tokens do not fit an llm.c header (int32 count)"));
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(cat(tmp, ": cannot create: ", std::strerror(errno)));
  int32_t header[256] = {};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  auto write_all = [&](const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t w = ::write(fd, p, bytes);
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      p += w;
      bytes -= static_cast<size_t>(w);
    }
    return true;
  };
  const bool ok = write_all(header, sizeof(header)) && write_all(tokens.data(), tokens.size() * 2) && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return absl::ResourceExhaustedError(cat(path, ": write failed: ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(cat(path, ": rename failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace zero
