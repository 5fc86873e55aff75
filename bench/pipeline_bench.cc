// The pipeline bubble, measured (mpirun -np W pipeline_bench): a GPT whose
// blocks carry the work (8 blocks of width 256, a 256-entry vocabulary, 128
// tokens x 4 sequences per micro-batch) trained by Engine::train_batch on a
// mesh of P stages x W/P data-parallel ranks, ZeRO-1, for P in {1, 2, 4}
// and M micro-batches per step in {4, 8, 16}, under 1F1B and GPipe, and
// under interleaved 1F1B with v model chunks per stage
// (pipeline.num_layers_per_virtual_stage = 8 / (v P)): v in {2, 4} at P = 2,
// v = 2 at P = 4.
//
// Every rank enters the step after a barrier; the schedule lasts as long as
// its slowest stage (the max over ranks of StepResult::pipeline_s). A stage
// is idle for whatever part of that it does not compute (forward_s +
// backward_s): waiting for a neighbour, before its first micro-batch
// arrives and after its last backward, and in transfers that did not
// overlap. The counters, per benchmark (means over the steps and ranks,
// all-reduced so that rank 0 reports them):
//   idle_fraction        1 - busy / the schedule's time, mean over ranks
//   ideal_bubble         its ideal, (P - 1) / (v M + P - 1): stages of equal work, each on a processor of its own
//   ratio_to_ideal       idle_fraction / ideal_bubble
//   bubble_over_compute  Megatron's bubble time fraction: idle / busy, mean over ranks
//   megatron_bubble      its ideal, (P - 1) / (v M) (v = 1 without interleaving)
//   recv_wait_fraction   of the schedule's time, the time spent waiting in receives (pipeline_wait_s)
//   step_ms              wall time of one optimizer step (train_batch)
//   tokens_per_s         the global batch's tokens per second
// The world's ranks share this machine's cores: with more ranks than cores
// the stages do not run concurrently and the measured bubble is not the
// schedule's alone (say so beside the figures).
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "bench/mpi_bench_main.h"
#include "comm/device_mesh.h"
#include "graph/build_model.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"

namespace zero {
namespace {

Communicator* g_comm = nullptr;
const GptConfig kModel{.n_layer = 8, .n_head = 4, .d_model = 256, .vocab_size = 256, .seq_len = 128};
constexpr int64_t kMicroBatch = 4;

void BM_Pipeline(benchmark::State& state) {
  const int stages = static_cast<int>(state.range(0));
  const int micro_batches = static_cast<int>(state.range(1));
  const auto schedule = state.range(2) == 0 ? PipelineScheduleKind::k1F1B : PipelineScheduleKind::kGPipe;
  const int chunks = static_cast<int>(state.range(3));
  const int64_t per_virtual = chunks > 1 ? kModel.n_layer / (int64_t{chunks} * stages) : 0;
  Communicator& world = *g_comm;
  if (world.world_size() % stages != 0) {
    state.SkipWithError("the world does not divide into these stages");
    return;
  }
  std::unique_ptr<DeviceMesh> mesh = DeviceMesh::create(world, 1, stages).value();
  EngineConfig ec;
  ec.zero.stage = ZeroStage::k1;
  ec.micro_batch_size = kMicroBatch;
  ec.gradient_accumulation_steps = micro_batches;
  ec.pre_divide = mesh->shape().data;
  ec.pipeline.stages = stages;
  ec.pipeline.schedule = schedule;
  ec.pipeline.partition_method = PartitionMethod::kUniform;
  ec.pipeline.num_layers_per_virtual_stage = per_virtual;
  CpuBackend backend;
  std::unique_ptr<Engine> engine =
      Engine::create(build_model(kModel, *mesh, {false, PartitionMethod::kUniform, per_virtual}).value(), ec, backend,
                     *mesh)
          .value();
  const int64_t n = kMicroBatch * kModel.seq_len;
  std::vector<int32_t> ids(n), targets(n);
  auto next = [&](int micro) -> absl::StatusOr<Batch> {
    for (int64_t i = 0; i < n; ++i) {
      ids[i] = static_cast<int32_t>((i * 7 + micro) % kModel.vocab_size);
      targets[i] = static_cast<int32_t>((i * 7 + micro + 1) % kModel.vocab_size);
    }
    return Batch{Tensor::wrap(ids.data(), {kMicroBatch, kModel.seq_len}, DType::kI32),
                 Tensor::wrap(targets.data(), {kMicroBatch, kModel.seq_len}, DType::kI32)};
  };
  // One step to warm up (first-touch pages, oneDNN primitives).
  (void)engine->train_batch(next).value();
  double idle = 0, over_compute = 0, recv_wait = 0, wall = 0;
  int64_t steps = 0;
  for (auto _ : state) {
    (void)world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const StepResult r = engine->train_batch(next).value();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (stages > 1) {
      const double schedule = world.all_reduce_max(r.pipeline_s).value();
      const double busy = r.forward_s + r.backward_s;
      idle += 1.0 - busy / schedule;
      over_compute += (schedule - busy) / busy;
      recv_wait += r.pipeline_wait_s / schedule;
    }
    ++steps;
  }
  const int w = world.world_size();
  const double fraction = world.all_reduce_sum(idle / steps).value() / w;
  const double waiting = world.all_reduce_sum(recv_wait / steps).value() / w;
  const double bubble = world.all_reduce_sum(over_compute / steps).value() / w;
  const double mean_wall = world.all_reduce_max(wall / steps).value();
  const double ideal = ideal_bubble_fraction(stages, micro_batches * chunks);  // (P - 1) / (v M + P - 1)
  state.counters["idle_fraction"] = fraction;
  state.counters["recv_wait_fraction"] = waiting;
  state.counters["ideal_bubble"] = ideal;
  if (stages > 1) {
    state.counters["ratio_to_ideal"] = fraction / ideal;
    state.counters["bubble_over_compute"] = bubble;
    state.counters["megatron_bubble"] = interleaved_bubble_fraction(stages, micro_batches, chunks);
  }
  state.counters["step_ms"] = mean_wall * 1e3;
  state.counters["tokens_per_s"] =
      static_cast<double>(mesh->shape().data * micro_batches * n) / mean_wall;
}

}  // namespace

void register_benchmarks(Communicator& comm) {
  g_comm = &comm;
  auto add = [](const char* name, int p, int m, int schedule, int chunks) {
    benchmark::RegisterBenchmark(name, BM_Pipeline)
        ->Args({p, m, schedule, chunks})
        ->ArgNames({"P", "M", "gpipe", "v"})
        ->Iterations(5)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  };
  for (int schedule : {0, 1})
    for (int p : {1, 2, 4})
      for (int m : {4, 8, 16}) {
        if (p == 1 && schedule == 1) continue;  // no schedule without stages
        add(schedule == 0 ? "pipeline/1f1b" : "pipeline/gpipe", p, m, schedule, 1);
      }
  // Interleaved 1F1B: v chunks of 8 / (v P) blocks per stage.
  for (const auto& [p, v] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}})
    for (int m : {4, 8, 16}) add("pipeline/interleaved", p, m, 0, v);
}

}  // namespace zero
