// zero-data: prepares training data in llm.c's token-shard format.
//
//   zero-data bytes-to-llmc --input PATH --out FILE
//
// PATH is a file, a directory or a glob; every file's bytes become tokens
// 0..255, files separated by token 0 (NUL never occurs in text, so it marks
// the document boundary). The shard is written atomically.
// `zero-data bytes-to-llmc --help` prints its usage (runtime/tools/cli.h).
// Exit status: 0 written; 1 unreadable input or a failed write (named); 2 bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/data/token_source.h"
#include "runtime/tools/cli.h"

namespace {

constexpr const char* kUsage =
    "usage: zero-data bytes-to-llmc --input PATH --out FILE\n"
    "\n"
    "Prepares training data in llm.c's token-shard format; `zero-data SUBCOMMAND --help` for each.\n";

constexpr const char* kBytesUsage =
    "usage: zero-data bytes-to-llmc --input PATH --out FILE\n"
    "\n"
    "Writes the bytes of every file under PATH (a file, a directory or a glob) as an llm.c token shard\n"
    "(vocabulary 256), each file preceded by token 0 (NUL, the document boundary).\n";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  zero::cli::init_app(app, "zero-data", kUsage);
  app.require_subcommand(1);
  std::string input, out;
  CLI::App* bytes = app.add_subcommand("bytes-to-llmc", "bytes of text files as an llm.c token shard (vocabulary 256)");
  zero::cli::set_usage(*bytes, kBytesUsage);
  bytes->add_option("--input", input, "a file, a directory or a glob pattern")->type_name("PATH")->required()->take_last();
  bytes->add_option("--out", out, "the shard to write")->type_name("FILE")->required()->take_last();
  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;
  absl::StatusOr<std::unique_ptr<zero::TokenSource>> src = zero::open_text_bytes(input);
  if (!src.ok()) {
    std::fprintf(stderr, "zero-data: %s\n", std::string(src.status().message()).c_str());
    return 1;
  }
  std::vector<uint16_t> tokens;
  std::vector<int32_t> buf;
  for (int64_t s = 0; s < (*src)->num_sequences(); ++s) {
    const int64_t n = (*src)->sequence_length(s);
    buf.resize(n);
    if (const absl::Status st = (*src)->read(s, 0, n, buf.data()); !st.ok()) {
      std::fprintf(stderr, "zero-data: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    tokens.push_back(0);
    for (int32_t t : buf) tokens.push_back(static_cast<uint16_t>(t));
  }
  const absl::Status st = zero::write_llmc_shard(out, tokens);
  if (!st.ok()) {
    std::fprintf(stderr, "zero-data: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("wrote %s: %zu tokens from %s\n", out.c_str(), tokens.size(), (*src)->describe().c_str());
  return 0;
}
