// zero-data: prepares training data in llm.c's token-shard format.
//
//   zero-data bytes-to-llmc --input PATH --out FILE
//
// PATH is a file, a directory or a glob; every file's bytes become tokens
// 0..255, files separated by token 0 (NUL never occurs in text, so it marks
// the document boundary). The shard is written atomically.
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/data/token_source.h"

namespace {

constexpr const char* kUsage =
    "usage: zero-data bytes-to-llmc --input PATH --out FILE\n"
    "  writes the bytes of every file under PATH as an llm.c token shard (vocabulary 256)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "bytes-to-llmc") {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string input, out;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--input") input = argv[i + 1];
    else if (a == "--out") out = argv[i + 1];
    else {
      std::fprintf(stderr, "zero-data: unknown argument %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (input.empty() || out.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
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
    (*src)->read(s, 0, n, buf.data());
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
