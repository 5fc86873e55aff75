// Token sources: a training corpus as one or more read-only token sequences
// (documents/shards). Windows of seq_len + 1 tokens are drawn inside one
// sequence, never across two.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace zero {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_sequences() const = 0;
  virtual int64_t sequence_length(int64_t seq) const = 0;
  // Copies tokens [offset, offset + n) of sequence `seq` as int32. Fails,
  // naming the file and the byte, when a file changed under the run (a
  // shard truncated while it is read).
  virtual absl::Status read(int64_t seq, int64_t offset, int64_t n, int32_t* out) const = 0;
  // Largest token id + 1 the source can produce (256 for bytes; the max seen for llm.c shards).
  virtual int64_t vocab_bound() const = 0;
  // "3 llm.c shards, 1.2M tokens"
  virtual std::string describe() const = 0;
};

// Files named by a path: a regular file, a directory (its regular files,
// sorted, not recursive), or a glob pattern. Errors name the path.
absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& path);

// Every listed file's bytes as tokens 0..255 (vocabulary 256).
absl::StatusOr<std::unique_ptr<TokenSource>> open_text_bytes(const std::string& path);

// llm.c token shards: int32 header[256] = {20240520, 1, ntok, 0...}, then
// ntok uint16 tokens. Every file is validated field by field (magic,
// version, exact size); tokens are checked against vocab_size. Tokens are
// read with pread (not mapped), so a file truncated during the run is an
// error naming it, not a SIGBUS.
absl::StatusOr<std::unique_ptr<TokenSource>> open_llmc_shards(const std::string& path,
                                                              int64_t vocab_size);

// Writes tokens as one llm.c shard, atomically (temporary name, fsync, rename).
absl::Status write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

}  // namespace zero
