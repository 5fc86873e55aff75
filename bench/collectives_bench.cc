// Collective bandwidth on these machines, ZeroEngine's communicator against
// Open MPI as a user gets it, in the same run (mpirun -np N collectives_bench).
//
// Open MPI's reducing collectives (reduce-scatter, all-reduce) allocate and
// free full-size temporaries on every call; with glibc's defaults those are
// fresh mmaps, page-faulted each time. ZeroEngine's communicator tells glibc
// (mallopt) to keep freed memory, so the temporaries are reused, and it
// reduces in place on the engine's own buffers. Each benchmark below runs the
// same collective on the same sizes twice: "openmpi_defaults" (glibc's
// default allocation policy restored around the call) and "zeroengine".
// Both go through the communicator, which issues a reducing collective over
// 16 MiB as calls of at most 16 MiB (comm/mpi_communicator.cc), so the 64 MiB
// rows compare the allocation policies on 16 MiB calls. Counters: algbw_GBps (buffer bytes / time, the usual algorithm bandwidth)
// and, on the zeroengine rows, ratio_to_openmpi (from the same process).
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <chrono>
#include <climits>
#include <map>
#include <vector>

#include "comm/communicator.h"

namespace zero {
namespace {

Communicator* g_comm = nullptr;
std::map<std::string, double> g_openmpi_gbps;

void glibc_defaults() {
  mallopt(M_ARENA_MAX, 0);
  mallopt(M_MMAP_MAX, 65536);
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}
void keep_freed_memory() {  // what MpiCommunicator::create does
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_ARENA_MAX, 1);  // the communication thread's temporaries come from the main (unbounded) heap
}

enum class Op { kReduceScatter, kAllReduce, kAllGather };

void BM_Collective(benchmark::State& state, Op op, bool ours) {
  const int64_t bytes = state.range(0) << 20;
  const int64_t n = bytes / 4;
  const int w = g_comm->world_size();
  std::vector<float> buf(n, 1.0f), recv(n / w);
  if (ours) keep_freed_memory();
  else glibc_defaults();
  auto run = [&] {
    switch (op) {
      case Op::kReduceScatter:
        return g_comm->reduce_scatter(buf.data(), recv.data(), std::vector<int64_t>(w, n / w), DType::kF32);
      case Op::kAllReduce:
        return g_comm->all_reduce(buf.data(), n, DType::kF32, ReduceOp::kSum);
      case Op::kAllGather:
        return g_comm->all_gather(buf.data(), n / w, n / w, DType::kF32);
    }
    return absl::OkStatus();
  };
  (void)run();  // warm-up (first-touch of our buffers, MPI's connection set-up)
  double seconds = 0;
  for (auto _ : state) {
    (void)g_comm->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (!run().ok()) state.SkipWithError("collective failed");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  keep_freed_memory();
  const double gbps = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["algbw_GBps"] = gbps;
  const std::string key = std::to_string(static_cast<int>(op)) + "/" + std::to_string(state.range(0));
  if (!ours) g_openmpi_gbps[key] = gbps;
  else if (g_openmpi_gbps.count(key)) state.counters["ratio_to_openmpi"] = gbps / g_openmpi_gbps[key];
  state.counters["ranks"] = w;
}

}  // namespace

void register_benchmarks(Communicator& comm) {
  g_comm = &comm;
  const std::pair<const char*, Op> ops[] = {
      {"reduce_scatter", Op::kReduceScatter}, {"all_reduce", Op::kAllReduce}, {"all_gather", Op::kAllGather}};
  for (const auto& [name, op] : ops) {
    for (bool ours : {false, true}) {
      benchmark::RegisterBenchmark((std::string("BM_") + name + (ours ? "/zeroengine" : "/openmpi_defaults")).c_str(),
                                   [op = op, ours](benchmark::State& s) { BM_Collective(s, op, ours); })
          ->Arg(16)
          ->Arg(64)
          ->Iterations(20)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// Only rank 0 prints; every rank runs every benchmark (they are collectives).
}  // namespace zero

#include "bench/mpi_bench_main.h"
