// Token sources: a training corpus as one or more read-only token sequences
// (documents/shards). Windows of seq_len + 1 tokens are drawn inside one
// sequence, never across two.
//
// Two on-disk forms: text files read as bytes (vocabulary 256), and llm.c
// token shards with 16-bit or 32-bit tokens; and tokens in memory (text
// tokenized as the run starts, runtime/tools/training_data.h). The shard layout, byte by byte,
// and what the reader checks are in docs/data-format.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
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
  // shard truncated while it is read, or rewritten with ids >= the vocabulary).
  virtual absl::Status read(int64_t seq, int64_t offset, int64_t n, int32_t* out) const = 0;
  // Largest token id + 1 the source can produce (256 for bytes; the max seen for llm.c shards).
  virtual int64_t vocab_bound() const = 0;
  // The vocabulary size the data was written for: 256 for bytes; for llm.c
  // shards header[3] (the writer's tokenizer's vocabulary size; 0 = unknown,
  // as in llm.c's own files), or -1 when the shards of one path declare
  // different sizes (describe() names them). Nothing is refused on it here.
  virtual int64_t declared_vocab() const = 0;
  // Every size the files declare, each once, in file order (llm.c shards of
  // two tokenizers give two); {declared_vocab()} for a single source.
  virtual std::vector<int64_t> declared_vocabs() const { return {declared_vocab()}; }
  // "3 llm.c shards (32-bit tokens), 1.2M tokens"
  virtual std::string describe() const = 0;
};

// Files named by a path: a regular file, a directory (its regular files,
// sorted, not recursive), or a glob pattern. Errors name the path.
absl::StatusOr<std::vector<std::string>> expand_data_path(const std::string& path);

// Every listed file's bytes as tokens 0..255 (vocabulary 256). A file that
// starts with an llm.c shard magic is refused, naming it: it holds token ids,
// and reading them as bytes would train on the wrong tokens.
absl::StatusOr<std::unique_ptr<TokenSource>> open_text_bytes(const std::string& path);

// Tokens in memory (text tokenized when the run starts) as one sequence,
// declared for a vocabulary of `vocab_size` ids; describe() is `description`.
std::unique_ptr<TokenSource> make_memory_tokens(std::vector<int32_t> tokens, int64_t vocab_size,
                                                std::string description);

// llm.c token shards, 16-bit (GPT-2 header) or 32-bit (Llama-3 header).
// Every file is validated field by field (magic, version, token count against
// the exact size) and every token against vocab_size; errors name the file
// and the field or the position. All files of one path must have one token
// width: two widths mean two tokenizers, and that is refused. Tokens are read
// with pread (not mapped), so a file truncated during the run is an error
// naming it, not a SIGBUS.
absl::StatusOr<std::unique_ptr<TokenSource>> open_llmc_shards(const std::string& path,
                                                              int64_t vocab_size);

// Writes `tokens` as one llm.c shard for a vocabulary of `vocab_size` ids:
// 16-bit tokens when vocab_size <= kLlmcMaxVocabU16, 32-bit otherwise, and
// vocab_size in header[3] (declared_vocab() reads it back). A token
// < 0 or >= vocab_size is refused, naming its position and value, before
// anything is written, so no id is ever truncated. Atomic: a temporary file
// beside `path`, fsync, rename, fsync of the directory; on any failure a file
// already at `path` is left as it was.
absl::Status write_token_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size);

// Writes tokens that are already 16-bit as one 16-bit shard (same atomicity),
// with header[3] = 0: the vocabulary is not known.
// Token ids held as int32 go through write_token_shard, which cannot truncate.
absl::Status write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// The llm.c header: 256 little-endian int32 {magic, version, token count,
// declared vocabulary size (ours; llm.c writes 0), 0...}.
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr int32_t kLlmcMagicU16 = 20240520;  // llm.c "gpt-2": uint16 tokens
inline constexpr int32_t kLlmcVersionU16 = 1;
inline constexpr int32_t kLlmcMagicU32 = 20240801;  // llm.c "llama-3": uint32 tokens
inline constexpr int32_t kLlmcVersionU32 = 7;
// Largest vocabulary written with 16-bit tokens; larger ones get 32-bit tokens.
inline constexpr int64_t kLlmcMaxVocabU16 = 65535;

}  // namespace zero
