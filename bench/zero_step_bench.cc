// ZeRO training steps on a ~51M-parameter GPT (8 layers, d_model 512, 8 heads,
// vocabulary 50304, seq 64; fp32; micro-batch 4 per rank), for every stage,
// with and without overlap_comm. Run under mpirun with 1, 2 and 4 ranks:
//   mpirun -np N build/bench/zero_step_bench
// Counters:
//  * step_s: wall time of one optimizer step (forward, backward, reduction,
//    optimizer, all-gather); fwd_s, bwd_s, opt_s: the engine's own split of
//    it (wall_clock_breakdown's), comm_wait_s: the part spent waiting on
//    collectives; page_faults: minor page faults per step (memory the step
//    touches for the first time: what the caching allocator gave back);
//  * comm_over_psi: bytes this rank sent into collectives per step divided
//    by Psi x 4 bytes, next to paper_volume: the ZeRO paper's per-rank volume
//    (2 Psi for stages 0-2, 3 Psi for stage 3) times (W - 1) / W, the share a
//    ring sends. "stage3_regather" releases every parameter after use
//    (max_reuse_distance 0, no persistence), which is the paper's 3 Psi case;
//    "stage3" keeps DeepSpeed's defaults, under which a model this small is
//    never released between forward and backward.
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <chrono>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"

namespace zero {
namespace {

Communicator* g_comm = nullptr;
const GptConfig kModel{.n_layer = 8, .n_head = 8, .d_model = 512, .vocab_size = 50304, .seq_len = 64};
constexpr int64_t kMicro = 4;

void BM_ZeroStep(benchmark::State& state, int stage, bool overlap, bool regather) {
  const int w = g_comm->world_size(), rank = g_comm->rank();
  CpuBackend backend;
  EngineConfig ec;
  ec.micro_batch_size = kMicro;
  ec.pre_divide = w;
  ec.zero.stage = zero_stage(stage);
  ec.zero.overlap_comm = overlap;
  ec.zero.reduce_bucket_size = 5000000;  // several buckets, so overlap has something to overlap
  ec.zero.allgather_bucket_size = 5000000;
  if (regather) {
    ec.zero.max_reuse_distance = 0;
    ec.zero.param_persistence_threshold = 0;
  }
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 1e-4f};
  auto engine = initialize(std::make_unique<Gpt>(kModel), ec, backend, g_comm);
  if (!engine.ok()) {
    state.SkipWithError(std::string(engine.status().message()).c_str());
    return;
  }
  std::vector<int32_t> ids(kMicro * 64), targets(kMicro * 64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7919 + rank * 104729) % 50257);
    targets[i] = static_cast<int32_t>((i * 31 + 7) % 50257);
  }
  const Batch batch{Tensor::wrap(ids.data(), {kMicro, 64}, DType::kI32),
                    Tensor::wrap(targets.data(), {kMicro, 64}, DType::kI32)};
  StepResult last;
  auto step = [&] {
    (*engine)->forward(batch).value();
    (void)(*engine)->backward();
    last = (*engine)->step().value_or(StepResult());
  };
  step();  // warm-up; the stage-3 trace is recorded here
  double seconds = 0, phases[4] = {0, 0, 0, 0};  // forward, backward, step, waiting on communication
  int64_t bytes = 0;
  double faults = 0;
  for (auto _ : state) {
    (void)g_comm->barrier();
    rusage u0{}, u1{};
    getrusage(RUSAGE_SELF, &u0);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    getrusage(RUSAGE_SELF, &u1);
    faults += static_cast<double>(u1.ru_minflt - u0.ru_minflt);
    state.SetIterationTime(s);
    seconds += s;
    bytes += last.comm_bytes;
    phases[0] += last.forward_s, phases[1] += last.backward_s, phases[2] += last.step_s;
    phases[3] += last.comm_wait_s;
  }
  const double n = static_cast<double>(state.iterations());
  const double psi_bytes = static_cast<double>((*engine)->num_parameters()) * 4.0;
  state.counters["ranks"] = w;
  state.counters["step_s"] = seconds / n;
  state.counters["fwd_s"] = phases[0] / n;
  state.counters["bwd_s"] = phases[1] / n;
  state.counters["opt_s"] = phases[2] / n;
  state.counters["comm_wait_s"] = phases[3] / n;
  state.counters["page_faults"] = faults / n;
  state.counters["comm_over_psi"] = static_cast<double>(bytes) / n / psi_bytes;
  state.counters["paper_volume"] = (stage == 3 ? 3.0 : 2.0) * (w - 1) / w;
  state.counters["tokens_per_s"] = static_cast<double>(w * kMicro * 64) / (seconds / n);
}

}  // namespace

void register_benchmarks(Communicator& comm) {
  g_comm = &comm;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {false, true}) {
      const std::string name = "BM_ZeroStep/stage" + std::to_string(stage) + (overlap ? "/overlap" : "/no_overlap");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { BM_ZeroStep(s, stage, overlap, false); })
          ->Iterations(3)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("BM_ZeroStep/stage3_regather/overlap",
                               [](benchmark::State& s) { BM_ZeroStep(s, 3, true, true); })
      ->Iterations(3)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace zero

#include "bench/mpi_bench_main.h"
