// Encode throughput of zero::Tokenizer against Hugging Face `tokenizers` (or
// `sentencepiece`, for a tokenizer.model-only directory) at the same thread
// count, measured in the same run on the same bytes.
//
//   ZE_TOKENIZERS_PYTHON=/path/to/python build/bench/tokenizer_bench
//       [--corpus_kib=3072] [--passes=3] [--add_special=1] [--peer_fast=1] [benchmark flags]
//
// The text is tests/data/tokenizers/corpus.txt repeated to corpus_kib, cut
// into lines as Python's str.splitlines() cuts them; each line is one
// encode() call (with add_special: the post-processor's bos/eos per line), as
// the peer script tests/data/tokenizers/throughput.py encodes each line with
// encode_batch. N threads: N std::threads that live for the benchmark and
// share one Tokenizer, taking 64-line chunks from a shared counter (rayon's
// work stealing does the same job for the peer). One untimed warm-up pass
// fills both sides' word caches, then each side's rate is the median of its
// timed passes: ours `passes`, the peer's at least 3 and at least 1 s.
//
// The peer runs, in its own process just before ours, when
// ZE_TOKENIZERS_PYTHON names a Python with `tokenizers` (and `sentencepiece`
// for spm_only); the repeated corpus is written to a temporary file for it
// (removed however the program ends, SIGKILL aside). For a tokenizer.json
// kind it runs twice: encode_batch (Encodings with offsets, what the issue
// names) and encode_batch_fast (no offsets: its fastest ids-only path; off
// with --peer_fast=0). Counters: bytes_per_second and tokens_per_second
// (ours), peer_*, ratio (ours / encode_batch, or / sentencepiece) and
// ratio_fast; cpu_per_wall and peer_cpu_per_wall show how many cores each
// side actually got (on a shared host, 2 threads may get one). When the peer
// is not there the label says "peer: not available" and no ratio is reported.
//
// Both sides must produce the same lines, bytes and tokens; the counts are
// in the label, and a difference marks it "MISMATCH" and makes the program
// exit 1 after the summary table.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/stats.h"
#include "bench/temp_file.h"
#include "nlohmann/json.hpp"
#include "runtime/data/tokenizer.h"

namespace zero {
namespace {

// The kinds of tests/data/tokenizers, as their directories are named.
constexpr const char* kKinds[] = {"gpt2", "llama3", "qwen2", "smollm", "llama2", "mistral", "gemma", "spm_only"};
constexpr int kThreadCounts[] = {1, 2};
constexpr size_t kChunkLines = 64;  // lines a worker takes at a time

constexpr const char* kUsage = R"(usage: tokenizer_bench [--corpus_kib=N] [--passes=N] [--add_special=0|1] [--peer_fast=0|1]
                       [--data_dir=DIR] [benchmark flags]

Encode throughput of zero::Tokenizer per tokenizer kind at 1 and 2 threads,
against Hugging Face `tokenizers` run by tests/data/tokenizers/throughput.py
in the same run, when ZE_TOKENIZERS_PYTHON names a Python that has it.

  --corpus_kib=N     corpus.txt repeated to at least N KiB (default 3072)
  --passes=N         timed passes over the text per benchmark (default 3)
  --add_special=0|1  the post-processor's special tokens per line (default 1)
  --peer_fast=0|1    also time the peer's encode_batch_fast (default 1)
  --data_dir=DIR     the tokenizer directories and corpus.txt (default tests/data/tokenizers)
  --help             this text and Google Benchmark's flags

)";

struct BenchConfig {
  std::string data_dir = std::string(ZE_SOURCE_DIR) + "/tests/data/tokenizers";
  int64_t corpus_bytes = int64_t{3072} << 10;
  int passes = 3;
  bool add_special = true;
  bool peer_fast = true;
  std::string python;       // ZE_TOKENIZERS_PYTHON; empty: no peer
  std::string text_path;    // the repeated corpus, for the peer
  std::string text;         // the repeated corpus
  std::vector<std::string_view> lines;
  int64_t line_bytes = 0;   // bytes of the lines, line breaks excluded (what the peer counts)
};
BenchConfig g_config;

// One side's figures for one benchmark run.
struct Rates {
  double bytes_per_s = 0, tokens_per_s = 0;
};
struct Row {
  std::string kind;
  int threads = 0;
  int64_t tokens = 0;
  Rates ours, peer, peer_fast;  // peer*: zero when not measured
  double cpu_per_wall = 0, peer_cpu_per_wall = 0;  // below `threads`: cores taken by the host's other work
  bool mismatch = false;
};
std::vector<Row> g_rows;  // one per benchmark run, in run order

using bench::median;

// The lines of `text` as Python's str.splitlines() gives them: \n, \r, \r\n,
// \v, \f, \x1c-\x1e, U+0085, U+2028 and U+2029 end a line; no empty line
// after a final break.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t brk = 0;  // the break's length in bytes
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) brk = 1;
    else if (c == '\r') brk = i + 1 < text.size() && text[i + 1] == '\n' ? 2 : 1;
    else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x85) brk = 2;
    else if (c == 0xE2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x80 &&
             (static_cast<unsigned char>(text[i + 2]) & 0xFE) == 0xA8)  // U+2028, U+2029
      brk = 3;
    if (brk == 0) {
      ++i;
      continue;
    }
    lines.push_back(text.substr(start, i - start));
    i += brk;
    start = i;
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

// Threads that encode every line once per pass, sharing one Tokenizer. They
// live as long as the pool, so their per-thread word caches (bpe_model.cc)
// stay warm from one pass to the next, as the peer's cache does.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tokenizer, const std::vector<std::string_view>& lines, int threads, bool add_special)
      : tokenizer_(tokenizer), lines_(lines), add_special_(add_special) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  EncodePool(const EncodePool&) = delete;
  EncodePool& operator=(const EncodePool&) = delete;

  // Encodes every line once; returns the number of ids produced.
  int64_t run_pass() {
    std::unique_lock<std::mutex> lock(mu_);
    next_line_.store(0);
    tokens_.store(0);
    running_ = static_cast<int>(workers_.size());
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [this] { return running_ == 0; });
    return tokens_.load();
  }

 private:
  void work() {
    std::vector<int32_t> ids;
    int64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      int64_t tokens = 0;
      for (;;) {
        const size_t first = next_line_.fetch_add(kChunkLines);
        if (first >= lines_.size()) break;
        const size_t last = std::min(lines_.size(), first + kChunkLines);
        for (size_t i = first; i < last; ++i) {
          ids.clear();
          tokenizer_.encode(lines_[i], add_special_, &ids);
          tokens += static_cast<int64_t>(ids.size());
        }
      }
      tokens_.fetch_add(tokens);
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) done_.notify_one();
    }
  }

  const Tokenizer& tokenizer_;
  const std::vector<std::string_view>& lines_;
  const bool add_special_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  int64_t generation_ = 0;  // bumped per pass
  int running_ = 0;         // workers still in this pass
  bool stop_ = false;
  std::atomic<size_t> next_line_{0};
  std::atomic<int64_t> tokens_{0};
};

// What throughput.py printed, or why there is nothing.
struct PeerResult {
  bool ok = false;
  std::string error;    // when !ok
  std::string library;  // "tokenizers 0.23.3"
  std::string method;   // "encode_batch"
  int64_t lines = 0, bytes = 0, tokens = 0;
  double cpu_per_wall = 0;  // its process's CPU seconds per second of its timed passes
  Rates rates;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

PeerResult run_peer(const std::string& kind, int threads, bool fast) {
  PeerResult r;
  if (g_config.python.empty()) {
    r.error = "ZE_TOKENIZERS_PYTHON unset";
    return r;
  }
  const std::string cmd = shell_quote(g_config.python) + " " + shell_quote(g_config.data_dir + "/throughput.py") + " " +
                          shell_quote(g_config.data_dir + "/" + kind) + " " + shell_quote(g_config.text_path) + " " +
                          std::to_string(threads) + (g_config.add_special ? " --add-special-tokens" : "") +
                          (fast ? " --fast" : "") + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    r.error = std::string("cannot start ") + g_config.python + ": " + std::strerror(errno);
    return r;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = ::pclose(pipe);
  const size_t brace = out.rfind("\n{") != std::string::npos ? out.rfind("\n{") + 1 : out.find('{');
  auto tail = [&] {
    std::string t = out.size() > 300 ? "..." + out.substr(out.size() - 300) : out;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    std::replace(t.begin(), t.end(), '\n', ' ');
    return t;
  };
  if (rc != 0 || brace == std::string::npos) {
    const std::string how = rc == -1 ? "pclose failed"
                            : WIFEXITED(rc) ? "exit " + std::to_string(WEXITSTATUS(rc))
                                            : "signal " + std::to_string(WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
    r.error = g_config.python + " throughput.py failed (" + how + ")" + (out.empty() ? "" : ": " + tail());
    return r;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(out.substr(brace));
    r.library = j.at("library").get<std::string>();
    r.method = j.at("method").get<std::string>();
    r.lines = j.at("lines").get<int64_t>();
    r.bytes = j.at("bytes").get<int64_t>();
    r.tokens = j.at("tokens").get<int64_t>();
    r.rates.bytes_per_s = j.at("bytes_per_s").get<double>();
    r.rates.tokens_per_s = j.at("tokens_per_s").get<double>();
    if (j.contains("cpu_per_wall") && j["cpu_per_wall"].is_number()) r.cpu_per_wall = j["cpu_per_wall"].get<double>();
    r.ok = true;
  } catch (const std::exception& e) {
    r.error = std::string("cannot read throughput.py's JSON (") + e.what() + "): " + tail();
  }
  return r;
}

double process_cpu_seconds() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Compares the peer's counts with ours; "" when equal, else what differs.
std::string count_mismatch(const PeerResult& p, int64_t tokens) {
  std::string m;
  auto differ = [&](const char* what, int64_t ours, int64_t theirs) {
    if (ours != theirs) m += std::string(m.empty() ? "" : ", ") + what + " " + std::to_string(ours) + " != peer " +
                             std::to_string(theirs) + " (" + p.method + ")";
  };
  differ("lines", static_cast<int64_t>(g_config.lines.size()), p.lines);
  differ("bytes", g_config.line_bytes, p.bytes);
  differ("tokens", tokens, p.tokens);
  return m;
}

void BM_Encode(benchmark::State& state, const std::string& kind, int threads) {
  const std::string dir = g_config.data_dir + "/" + kind;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = load_tokenizer(dir);
  if (!tokenizer.ok()) {
    state.SkipWithError(tokenizer.status().ToString().c_str());
    return;
  }
  // The peer first, in its own process, while ours is idle: the two never share the cores.
  const PeerResult peer = run_peer(kind, threads, /*fast=*/false);
  // encode_batch_fast is `tokenizers`' alone; sentencepiece (a tokenizer.model-only kind) has one method.
  const bool has_fast = g_config.peer_fast && std::ifstream(dir + "/tokenizer.json").good();
  const PeerResult peer_fast = peer.ok && has_fast ? run_peer(kind, threads, /*fast=*/true) : PeerResult{};

  EncodePool pool(**tokenizer, g_config.lines, threads, g_config.add_special);
  const int64_t tokens = pool.run_pass();  // warm-up, untimed: fills the word caches; the count
  std::vector<double> seconds;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t got = pool.run_pass();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (got != tokens) {
      state.SkipWithError(("tokens differ between passes: " + std::to_string(tokens) + " in the warm-up, then " +
                           std::to_string(got)).c_str());
      return;
    }
    state.SetIterationTime(s);
    seconds.push_back(s);
  }

  // Below `threads`: the host's other work took cores from us (this machine is shared).
  double wall = 0;
  for (double x : seconds) wall += x;
  const double cpu_per_wall = wall > 0 ? (process_cpu_seconds() - cpu0) / wall : 0.0;
  state.counters["cpu_per_wall"] = cpu_per_wall;
  Row row;
  row.kind = kind;
  row.threads = threads;
  row.tokens = tokens;
  row.cpu_per_wall = cpu_per_wall;
  const double pass_s = median(seconds);
  row.ours = {static_cast<double>(g_config.line_bytes) / pass_s, static_cast<double>(tokens) / pass_s};
  state.counters["bytes_per_second"] = row.ours.bytes_per_s;
  state.counters["tokens_per_second"] = row.ours.tokens_per_s;
  state.counters["tokens"] = static_cast<double>(tokens);
  std::string label = (*tokenizer)->describe() + "; ";
  if (!peer.ok) {
    label += "peer: not available (" + peer.error + ")";
  } else {
    std::string mismatch = count_mismatch(peer, tokens);
    if (peer_fast.ok) {
      const std::string m = count_mismatch(peer_fast, tokens);
      if (!m.empty()) mismatch += (mismatch.empty() ? "" : ", ") + m;
    }
    row.mismatch = !mismatch.empty();
    row.peer = peer.rates;
    row.peer_cpu_per_wall = peer.cpu_per_wall;
    state.counters["peer_bytes_per_second"] = peer.rates.bytes_per_s;
    state.counters["peer_tokens_per_second"] = peer.rates.tokens_per_s;
    state.counters["peer_cpu_per_wall"] = peer.cpu_per_wall;
    state.counters["ratio"] = row.ours.bytes_per_s / peer.rates.bytes_per_s;
    if (peer_fast.ok) {
      row.peer_fast = peer_fast.rates;
      state.counters["ratio_fast"] = row.ours.bytes_per_s / peer_fast.rates.bytes_per_s;
    }
    label += "peer: " + peer.library + ", " +
             (row.mismatch ? "MISMATCH: " + mismatch : "tokens " + std::to_string(tokens) + " = peer's");
    if (has_fast && !peer_fast.ok) label += "; encode_batch_fast: " + peer_fast.error;
  }
  state.SetLabel(label);
  g_rows.push_back(row);
}

void print_summary() {
  std::printf("\nEncode throughput, %.2f MiB in %zu lines (corpus.txt repeated), add_special=%d, "
              "median of passes; %u hardware threads here\n",
              static_cast<double>(g_config.line_bytes) / (1 << 20), g_config.lines.size(), g_config.add_special ? 1 : 0,
              std::thread::hardware_concurrency());
  std::printf("%-9s %7s %10s %10s %6s %15s %10s %10s %18s\n", "kind", "threads", "ours MB/s", "peer MB/s", "ratio",
              "peer fast MB/s", "ratio fast", "tokens", "cpu/wall ours peer");
  for (const Row& r : g_rows) {
    std::printf("%-9s %7d %10.2f ", r.kind.c_str(), r.threads, r.ours.bytes_per_s / 1e6);
    if (r.peer.bytes_per_s > 0) {
      std::printf("%10.2f %6.2f ", r.peer.bytes_per_s / 1e6, r.ours.bytes_per_s / r.peer.bytes_per_s);
    } else {
      std::printf("%10s %6s ", "-", "-");
    }
    if (r.peer_fast.bytes_per_s > 0) {
      std::printf("%15.2f %10.2f ", r.peer_fast.bytes_per_s / 1e6, r.ours.bytes_per_s / r.peer_fast.bytes_per_s);
    } else {
      std::printf("%15s %10s ", "-", "-");
    }
    std::printf("%10lld %13.2f ", static_cast<long long>(r.tokens), r.cpu_per_wall);
    if (r.peer_cpu_per_wall > 0) std::printf("%4.2f", r.peer_cpu_per_wall);
    else std::printf("%4s", "-");
    std::printf("%s\n", r.mismatch ? "  MISMATCH (see the label)" : "");
  }
  if (g_config.python.empty()) {
    std::printf("peer: not available (set ZE_TOKENIZERS_PYTHON to a Python with `tokenizers`)\n");
  }
}

void register_benchmarks() {
  for (const char* kind : kKinds) {
    for (int threads : kThreadCounts) {
      const std::string name = std::string("BM_Encode/") + kind + "/threads:" + std::to_string(threads);
      const std::string k = kind;
      benchmark::RegisterBenchmark(name.c_str(), [k, threads](benchmark::State& s) { BM_Encode(s, k, threads); })
          ->Iterations(g_config.passes)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int run(int argc, char** argv) {
  const std::optional<int> done = bench::start_benchmarks(
      "tokenizer_bench", kUsage,
      {bench::int_flag("--corpus_kib", 1, int64_t{1} << 22, "a size in KiB (1 to 4194304)",
                       [](int64_t v) { g_config.corpus_bytes = v << 10; }),
       bench::int_flag("--passes", 1, 1000, "a number of passes (1 to 1000)",
                       [](int64_t v) { g_config.passes = static_cast<int>(v); }),
       bench::int_flag("--add_special", 0, 1, "0 or 1", [](int64_t v) { g_config.add_special = v != 0; }),
       bench::int_flag("--peer_fast", 0, 1, "0 or 1", [](int64_t v) { g_config.peer_fast = v != 0; }),
       bench::string_flag("--data_dir", &g_config.data_dir)},
      /*defaults=*/{}, register_benchmarks, argc, argv);
  if (done) return *done;

  const std::string corpus_path = g_config.data_dir + "/corpus.txt";
  std::ifstream in(corpus_path, std::ios::binary);
  std::stringstream corpus;
  corpus << in.rdbuf();
  if (!in || corpus.str().empty()) {
    std::fprintf(stderr, "tokenizer_bench: cannot read %s (--data_dir names the folder that holds it)\n",
                 corpus_path.c_str());
    return 1;
  }
  // Whole copies, so every line is a corpus line; the corpus ends with a line break.
  while (static_cast<int64_t>(g_config.text.size()) < g_config.corpus_bytes) g_config.text += corpus.str();
  g_config.lines = split_lines(g_config.text);
  for (std::string_view l : g_config.lines) g_config.line_bytes += static_cast<int64_t>(l.size());

  const char* python = std::getenv("ZE_TOKENIZERS_PYTHON");
  g_config.python = python ? python : "";
  std::unique_ptr<bench::TempTextFile> text_file;
  if (!g_config.python.empty()) {
    text_file = std::make_unique<bench::TempTextFile>("tokenizer_bench", g_config.text);
    if (!text_file->error().empty()) {
      std::fprintf(stderr, "tokenizer_bench: cannot write the peer's text file: %s\n", text_file->error().c_str());
      return 1;
    }
    g_config.text_path = text_file->path();
  }
  std::printf("tokenizer_bench: %.2f MiB, %zu lines; peer: %s\n", static_cast<double>(g_config.line_bytes) / (1 << 20),
              g_config.lines.size(),
              g_config.python.empty() ? "not available (ZE_TOKENIZERS_PYTHON unset)" : g_config.python.c_str());
  std::fflush(stdout);

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  for (const Row& r : g_rows) {
    if (r.mismatch) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) { return zero::run(argc, argv); }
