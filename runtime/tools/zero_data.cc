// zero-data: prepares training data as llm.c token shards
// (docs/data-format.md).
//
//   zero-data bytes-to-llmc --input PATH --out FILE
//
// PATH is a file, a directory or a glob; every file's bytes become tokens
// 0..255, files separated by token 0 (NUL never occurs in text, so it marks
// the document boundary). The shard is written atomically.
// `zero-data bytes-to-llmc --help` prints its usage (runtime/tools/cli.h).
// Each subcommand is a class holding its options (add_to, chosen, run); main only
// registers and dispatches, so a new subcommand is one more of each.
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

// Prints "zero-data: <message>" and returns exit status 1.
int fail(const absl::Status& st) {
  std::fprintf(stderr, "zero-data: %s\n", std::string(st.message()).c_str());
  return 1;
}

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
  BytesToLlmc bytes_to_llmc;
  bytes_to_llmc.add_to(app);
  if (const std::optional<int> exit_code = zero::cli::parse(app, argc, argv)) return *exit_code;
  if (bytes_to_llmc.chosen()) return bytes_to_llmc.run();
  return zero::cli::usage_error(app, "no subcommand given");  // unreachable: require_subcommand(1)
}
