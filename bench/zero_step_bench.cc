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
//  * BM_Stage3OverStage0: stage 3 and stage 0 engines in one process, steps
//    alternated: stage0_s, stage3_s (medians) and stage3_over_stage0, the
//    median of the per-pair ratios (issue 31's ZeRO-3 target, side by side),
//    and stage 3's page faults per step, which here are fewer than when it
//    runs alone (compare BM_ZeroStep/stage3's page_faults).
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"

namespace zero {
namespace {

Communicator* g_comm = nullptr;
const GptConfig kModel{.n_layer = 8, .n_head = 8, .d_model = 512, .vocab_size = 50304, .seq_len = 64};
constexpr int64_t kMicro = 4;

// One engine of kModel at a ZeRO stage on every rank, and its step.
class ZeroRun {
 public:
  ZeroRun(int stage, bool overlap, bool regather) {
    const int w = g_comm->world_size(), rank = g_comm->rank();
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
    auto engine = initialize(std::make_unique<Gpt>(kModel), ec, backend_, g_comm);
    if (!engine.ok()) {
      error_ = std::string(engine.status().message());
      return;
    }
    engine_ = std::move(*engine);
    ids_.resize(kMicro * 64), targets_.resize(kMicro * 64);
    for (size_t i = 0; i < ids_.size(); ++i) {
      ids_[i] = static_cast<int32_t>((i * 7919 + rank * 104729) % 50257);
      targets_[i] = static_cast<int32_t>((i * 31 + 7) % 50257);
    }
    step();  // warm-up; the stage-3 trace is recorded here
  }
  const std::string& error() const { return error_; }
  int64_t num_parameters() const { return engine_->num_parameters(); }
  // One optimizer step after a barrier; its wall seconds.
  double step() {
    (void)g_comm->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const Batch batch{Tensor::wrap(ids_.data(), {kMicro, 64}, DType::kI32),
                      Tensor::wrap(targets_.data(), {kMicro, 64}, DType::kI32)};
    engine_->forward(batch).value();
    (void)engine_->backward();
    last_ = engine_->step().value_or(StepResult());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const StepResult& last() const { return last_; }

 private:
  CpuBackend backend_;
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> ids_, targets_;
  StepResult last_;
  std::string error_;
};

void BM_ZeroStep(benchmark::State& state, int stage, bool overlap, bool regather) {
  const int w = g_comm->world_size();
  ZeroRun run(stage, overlap, regather);
  if (!run.error().empty()) {
    state.SkipWithError(run.error().c_str());
    return;
  }
  double seconds = 0, phases[4] = {0, 0, 0, 0};  // forward, backward, step, waiting on communication
  int64_t bytes = 0;
  double faults = 0;
  for (auto _ : state) {
    const double f0 = bench::minor_page_faults();
    const double s = run.step();
    faults += bench::minor_page_faults() - f0;
    state.SetIterationTime(s);
    seconds += s;
    const StepResult& last = run.last();
    bytes += last.comm_bytes;
    phases[0] += last.forward_s, phases[1] += last.backward_s, phases[2] += last.step_s;
    phases[3] += last.comm_wait_s;
  }
  const double n = static_cast<double>(state.iterations());
  const double psi_bytes = static_cast<double>(run.num_parameters()) * 4.0;
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

using bench::median;

// Stage 3 against stage 0, side by side: two engines in one process, their
// steps alternated, so that a noisy host slows both alike. Counters: the
// median step of each, and the median of the per-pair ratios.
void BM_Stage3OverStage0(benchmark::State& state, bool overlap) {
  ZeroRun zero0(0, overlap, false), zero3(3, overlap, false);
  if (!zero0.error().empty() || !zero3.error().empty()) {
    state.SkipWithError((zero0.error() + zero3.error()).c_str());
    return;
  }
  std::vector<double> s0, s3, ratio;
  double faults3 = 0;
  for (auto _ : state) {
    const double a = zero0.step();
    const double f0 = bench::minor_page_faults();
    const double b = zero3.step();
    faults3 += bench::minor_page_faults() - f0;
    state.SetIterationTime(a + b);
    s0.push_back(a), s3.push_back(b), ratio.push_back(b / a);
  }
  state.counters["stage0_s"] = median(s0);
  state.counters["stage3_s"] = median(s3);
  // Stage 3 faults fewer pages here than alone (BM_ZeroStep/stage3's
  // page_faults), though each engine has its own backend and caching
  // allocator: read the ratio beside both counts.
  state.counters["stage3_page_faults"] = faults3 / static_cast<double>(state.iterations());
  state.counters["stage3_over_stage0"] = median(ratio);
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
  for (bool overlap : {false, true}) {
    benchmark::RegisterBenchmark(overlap ? "BM_Stage3OverStage0/overlap" : "BM_Stage3OverStage0/no_overlap",
                                 [=](benchmark::State& s) { BM_Stage3OverStage0(s, overlap); })
        ->Iterations(8)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_ZeroStep/stage3_regather/overlap",
                               [](benchmark::State& s) { BM_ZeroStep(s, 3, true, true); })
      ->Iterations(3)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace zero

#include "bench/mpi_bench_main.h"
