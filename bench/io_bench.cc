// Sequential O_DIRECT bandwidth of IoEngine against fio (io_uring engine) in
// the same run, on the same file: write and read at block size 1 MiB and
// queue depth 32 and 8, reported in GB/s and as a ratio to fio's.
//
//   build/bench/io_bench [--dir=DIR] [--size_mib=4096] [--rounds=7] [--huge_pages=1]
//                        [--fio_mem=SPEC] [benchmark flags]
//
// DIR defaults to the build tree. The arguments are all checked first (--help
// prints them and exits 0; an unknown one exits 2), before anything is
// written. One file of size_mib (4 GiB; less when the filesystem has less than
// that plus 1 GiB free) is then laid out once, and every run overwrites or
// reads it in place, which is what a swap file sees in steady state; the file
// is removed however the program ends (an error, SIGINT, SIGTERM or SIGHUP
// included; SIGKILL aside).
//
// The disk here is virtual and its bandwidth swings by 2x from minute to
// minute, so each repetition runs IoEngine and fio back to back (alternating
// which goes first) and reports the ratio of that pair: counters GBps,
// fio_GBps, ratio_to_fio, whose medians over the repetitions are in the
// "_median" rows and in the summary. Repetitions of the four benchmarks are
// interleaved in random order (Google Benchmark's random interleaving). IoEngine moves the file as one transfer
// of 64 MiB requests over one registered 64 MiB buffer, cut into 1 MiB pieces
// with queue_depth in flight. fio runs with ioengine=io_uring, direct=1 and
// the same io_uring features the engine uses (--fixedbufs: registered
// buffers; --registerfiles: registered files), its defaults otherwise; its
// bandwidth is its own figure (bw_bytes).
//
// Buffer memory decides the read figures here, for both programs. The disk is
// virtio-blk without indirect descriptors (256-entry ring, seg_max 254): a
// request takes one ring descriptor per physically contiguous run of its
// buffer, so a 1 MiB request into 4 KiB pages scattered in RAM takes ~256 of
// them and the device holds ONE such request at a time, whatever the queue
// depth; reads then run at ~0.9-1.0 GB/s (writes less so: the host absorbs
// them faster). fio's buffers are malloc'd per run in 4 KiB pages whose
// contiguity is chance (pagemap: 255 runs per MiB -> 0.98 GB/s, 8 -> 1.85
// GB/s), which is why fio's read figure swings 1-2 GB/s between runs.
// IoEngine collapses its registered buffers into 2 MiB pages
// (IoEngineOptions::huge_page_buffers; the mode line says "... in 2 MiB
// pages"), so its requests are a few descriptors each. To compare like with
// like: --huge_pages=0 gives IoEngine 4 KiB pages too (chance contiguity, as
// fio's), and --fio_mem=SPEC hands fio's --mem option through:
// --fio_mem=shmhuge with a few 2 MiB pages reserved (sysctl vm.nr_hugepages=40
// while it runs) gives fio 2 MiB pages as IoEngine has. (A private mapping of
// a tmpfs mounted huge=always does not: fio's mmap: maps it privately, in
// 4 KiB pages; and mmapshared: buffers fail io_uring's registration.)
#include <benchmark/benchmark.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/stats.h"
#include "bench/temp_file.h"
#include "kernels/cpu/cpu_backend.h"
#include "nlohmann/json.hpp"
#include "offload/aligned_buffer_pool.h"
#include "offload/io_engine.h"

namespace zero {
namespace {

constexpr int64_t kBlockBytes = 1 << 20;
constexpr int64_t kChunkBytes = 64 << 20;  // one request; the buffer every request uses
constexpr int64_t kFreeMarginBytes = int64_t{1} << 30;

constexpr const char* kUsage = R"(usage: io_bench [--dir=DIR] [--size_mib=N] [--rounds=N] [--huge_pages=0|1] [--fio_mem=SPEC]
                [benchmark flags]

Sequential O_DIRECT write and read bandwidth of IoEngine and of fio (when
installed) on one file, block 1 MiB, queue depth 32 and 8.

  --dir=DIR          where the file goes (default: the build tree); not tmpfs (no O_DIRECT)
  --size_mib=N       the file's size in MiB, at least 64 (default 4096; less when DIR has less free)
  --rounds=N         repetitions of each benchmark (default 7)
  --huge_pages=0|1   IoEngine's buffers in 2 MiB pages (default 1)
  --fio_mem=SPEC     fio's --mem (default: fio's malloc)
  --help             this text and Google Benchmark's flags

The file is removed however the program ends.

)";

struct BenchConfig {
  std::string dir = ZE_BUILD_DIR;
  int64_t size_bytes = int64_t{4} << 30;
  int rounds = 7;
  bool huge_pages = true;  // IoEngineOptions::huge_page_buffers
  std::string fio_mem;     // fio's --mem; empty: fio's default (malloc)
  std::string path;   // the file
  bool have_fio = false;
};
BenchConfig g_config;
std::unique_ptr<AlignedBufferPool> g_pool;
std::map<std::string, std::vector<double>> g_gbps;  // "write/qd32/zeroengine" -> per repetition

std::string key(bool write, int qd) { return std::string(write ? "write" : "read") + "/qd" + std::to_string(qd); }

using bench::median;

// Moves the whole file with IoEngine; returns seconds, or a negative value after reporting an error.
double run_ours(bool write, int qd, benchmark::State* state, std::string* mode_out) {
  IoEngineOptions options;
  options.block_size = kBlockBytes;
  options.queue_depth = qd;
  options.huge_page_buffers = g_config.huge_pages;
  auto engine = IoEngine::create(options);
  if (!engine.ok()) {
    if (state) state->SkipWithError(engine.status().ToString().c_str());
    else std::fprintf(stderr, "io_bench: %s\n", engine.status().ToString().c_str());
    return -1;
  }
  (*engine)->register_buffers(g_pool->spans());
  if (mode_out) *mode_out = (*engine)->mode().describe();
  auto file = (*engine)->open(g_config.path, write ? IoFileMode::kWrite : IoFileMode::kRead);
  if (!file.ok()) {
    if (state) state->SkipWithError(file.status().ToString().c_str());
    else std::fprintf(stderr, "io_bench: %s\n", file.status().ToString().c_str());
    return -1;
  }
  std::vector<IoRequest> requests;
  for (int64_t at = 0; at < g_config.size_bytes; at += kChunkBytes) {
    const auto n = static_cast<size_t>(std::min(kChunkBytes, g_config.size_bytes - at));
    requests.push_back(IoRequest{write ? IoOp::kWrite : IoOp::kRead, &*file, g_pool->buffer(0).data, n, at});
  }
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status s = (*engine)->submit(requests).wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) {
    if (state) state->SkipWithError(s.ToString().c_str());
    else std::fprintf(stderr, "io_bench: %s\n", s.ToString().c_str());
    return -1;
  }
  if (!(*engine)->close(*file).ok()) return -1;
  return seconds;
}

// Runs fio on the same file; returns its bandwidth in bytes/s, or a negative
// value with *error set.
double run_fio(bool write, int qd, std::string* error) {
  const std::string cmd = "fio --name=zeroengine_io_bench --filename='" + g_config.path + "' --rw=" +
                          (write ? "write" : "read") + " --bs=" + std::to_string(kBlockBytes) +
                          " --iodepth=" + std::to_string(qd) +
                          " --ioengine=io_uring --fixedbufs --registerfiles --direct=1 --size=" +
                          std::to_string(g_config.size_bytes) +
                          (g_config.fio_mem.empty() ? "" : " --mem='" + g_config.fio_mem + "'") +
                          " --output-format=json 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *error = "cannot start fio";
    return -1;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = ::pclose(pipe);
  const size_t brace = out.find('{');
  if (rc != 0 || brace == std::string::npos) {
    *error = "fio failed (exit " + std::to_string(rc) + "): " + out.substr(0, 400);
    return -1;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(out.substr(brace));
    const nlohmann::json& job = j.at("jobs").at(0);
    if (job.at("error").get<int>() != 0) {
      *error = "fio job error " + std::to_string(job.at("error").get<int>());
      return -1;
    }
    return job.at(write ? "write" : "read").at("bw_bytes").get<double>();
  } catch (const std::exception& e) {
    *error = std::string("cannot parse fio's JSON: ") + e.what();
    return -1;
  }
}

// One repetition moves the file once with IoEngine and once with fio, back to
// back, in alternating order, so each ratio compares two runs minutes apart
// at most rather than two medians taken across the whole run.
void BM_SequentialIo(benchmark::State& state, bool write, int qd) {
  const std::string name = key(write, qd);
  const auto bytes = static_cast<double>(g_config.size_bytes);
  for (auto _ : state) {
    const bool fio_first = g_config.have_fio && g_gbps[name + "/zeroengine"].size() % 2 == 1;
    double fio_bw = 0;
    std::string error;
    if (fio_first && (fio_bw = run_fio(write, qd, &error)) <= 0) {
      state.SkipWithError(error.c_str());
      return;
    }
    const double seconds = run_ours(write, qd, &state, nullptr);
    if (seconds < 0) return;
    if (g_config.have_fio && !fio_first && (fio_bw = run_fio(write, qd, &error)) <= 0) {
      state.SkipWithError(error.c_str());
      return;
    }
    state.SetIterationTime(seconds);
    const double ours_gbps = bytes / seconds / 1e9;
    g_gbps[name + "/zeroengine"].push_back(ours_gbps);
    state.counters["GBps"] = ours_gbps;
    if (g_config.have_fio) {
      g_gbps[name + "/fio"].push_back(fio_bw / 1e9);
      g_gbps[name + "/ratio"].push_back(ours_gbps / (fio_bw / 1e9));
      state.counters["fio_GBps"] = fio_bw / 1e9;
      state.counters["ratio_to_fio"] = ours_gbps / (fio_bw / 1e9);
    }
  }
  state.SetBytesProcessed(g_config.size_bytes * state.iterations());
}

// Shrinks the file to what the filesystem holds with a 1 GiB margin.
bool fit_to_free_space() {
  struct statvfs vfs;
  if (::statvfs(g_config.dir.c_str(), &vfs) != 0) {
    std::fprintf(stderr, "io_bench: cannot stat %s: %s\n", g_config.dir.c_str(), std::strerror(errno));
    return false;
  }
  const auto avail = static_cast<int64_t>(vfs.f_bavail * vfs.f_frsize);
  const int64_t fits = (avail - kFreeMarginBytes) / kChunkBytes * kChunkBytes;
  if (fits < g_config.size_bytes) {
    if (fits < 4 * kChunkBytes) {
      std::fprintf(stderr, "io_bench: only %s free in %s; need at least 1.25 GiB\n", format_bytes(avail).c_str(),
                   g_config.dir.c_str());
      return false;
    }
    std::printf("io_bench: %s free in %s: file shrunk from %s to %s\n", format_bytes(avail).c_str(),
                g_config.dir.c_str(), format_bytes(g_config.size_bytes).c_str(), format_bytes(fits).c_str());
    g_config.size_bytes = fits;
  }
  return true;
}

void print_summary() {
  std::printf("\nMedians over %d repetitions, %s file, block 1 MiB, O_DIRECT, in %s\n", g_config.rounds,
              format_bytes(g_config.size_bytes).c_str(), g_config.dir.c_str());
  std::printf("buffers: IoEngine %s, fio %s (see the file comment: buffer contiguity decides reads here)\n",
              g_config.huge_pages ? "2 MiB pages where the kernel gives them" : "4 KiB pages",
              g_config.fio_mem.empty() ? "malloc, 4 KiB pages" : g_config.fio_mem.c_str());
  std::printf("%-6s %4s %16s %10s %20s %16s\n", "op", "qd", "zeroengine GB/s", "fio GB/s", "median paired ratio",
              "ratio of medians");
  for (bool write : {true, false}) {
    for (int qd : {32, 8}) {
      const std::string name = key(write, qd);
      const double ours = median(g_gbps[name + "/zeroengine"]);
      if (ours <= 0) continue;  // filtered out
      if (!g_config.have_fio) {
        std::printf("%-6s %4d %16.3f %10s %20s %16s\n", write ? "write" : "read", qd, ours, "-", "-", "-");
        continue;
      }
      const double fio = median(g_gbps[name + "/fio"]);
      std::printf("%-6s %4d %16.3f %10.3f %20.3f %16.3f\n", write ? "write" : "read", qd, ours, fio,
                  median(g_gbps[name + "/ratio"]), ours / fio);
    }
  }
  std::printf("per repetition, in run order (GB/s; ratio = zeroengine / fio of the same repetition):\n");
  for (const auto& [name, values] : g_gbps) {
    std::printf("  %-22s", name.c_str());
    for (double v : values) std::printf(" %6.3f", v);
    std::printf("\n");
  }
  if (!g_config.have_fio) std::printf("fio is not installed (apt-get install fio): no ratio\n");
}

void register_benchmarks() {
  for (int qd : {32, 8}) {
    for (bool write : {true, false}) {
      const std::string name = "BM_SequentialIo/" + key(write, qd);
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { BM_SequentialIo(s, write, qd); })
          ->Iterations(1)
          ->Repetitions(g_config.rounds)
          ->ReportAggregatesOnly(true)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

int run(int argc, char** argv) {
  // Every argument is checked before anything is written (nothing is, when
  // the benchmarks are only listed). Repetitions are interleaved unless the
  // caller chose otherwise.
  const std::optional<int> done = bench::start_benchmarks(
      "io_bench", kUsage,
      {bench::string_flag("--dir", &g_config.dir),
       bench::int_flag("--size_mib", kChunkBytes >> 20, int64_t{1} << 30, "a size of 64 MiB or more",
                       [](int64_t v) { g_config.size_bytes = v << 20; }),
       bench::int_flag("--rounds", 1, INT_MAX, "a number of rounds (1 or more)",
                       [](int64_t v) { g_config.rounds = static_cast<int>(v); }),
       bench::int_flag("--huge_pages", 0, 1, "0 or 1", [](int64_t v) { g_config.huge_pages = v != 0; }),
       bench::string_flag("--fio_mem", &g_config.fio_mem)},
      {"--benchmark_enable_random_interleaving=true"}, register_benchmarks, argc, argv);
  if (done) return *done;

  if (!fit_to_free_space()) return 1;
  g_config.path = g_config.dir + "/io_bench." + std::to_string(::getpid()) + ".dat";
  g_config.have_fio = std::system("command -v fio >/dev/null 2>&1") == 0;
  const bench::FileRemover remover(g_config.path);

  CpuBackend backend;
  auto pool = AlignedBufferPool::create(backend, 1, kChunkBytes);
  if (!pool.ok()) {
    std::fprintf(stderr, "io_bench: %s\n", pool.status().ToString().c_str());
    return 1;
  }
  g_pool = *std::move(pool);
  // Non-zero contents, in case the virtual disk treats zeros specially.
  uint8_t* data = g_pool->buffer(0).data;
  for (int64_t i = 0; i < kChunkBytes; ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);

  // Lay the file out once (untimed), so every measured write is an overwrite.
  std::string mode;
  if (run_ours(/*write=*/true, 32, nullptr, &mode) < 0) return 1;
  std::printf("io_bench: %s, IoEngine with %s\n", g_config.path.c_str(), mode.c_str());

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  g_pool.reset();
  return 0;
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) { return zero::run(argc, argv); }
