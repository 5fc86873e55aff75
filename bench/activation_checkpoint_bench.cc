// Activation checkpointing: memory saved against time paid, from no
// checkpointing to every block its own segment.
//
// BM_ActivationCheckpointing/K: one training step of an 8-layer GPT (d_model
// 256, 8 heads, vocabulary 4096, seq 128, micro-batch 4: activation-heavy,
// activations are 4x the model states) with its blocks in K checkpoint segments
// (K = 0: off). Each iteration times one step with K segments and, paused,
// one step of an identical engine without checkpointing, so the ratio of the
// two is measured under the same machine conditions. Counters:
//   act_peak_MiB       peak tracked activation bytes of a step (measured)
//   act_planned_MiB    the memory planner's prediction (runtime/engine/memory_plan.h)
//   act_vs_none        activation peak over the peak without checkpointing
//   step_s             seconds per step with K segments
//   ratio_to_none      step time over the step time without checkpointing
//                      (full recompute costs one more forward: target <= 1.4)
//   cpu_ratio_to_none  the same in process CPU time: steadier than wall time
//                      on a shared machine (run with OMP_NUM_THREADS=1 for it)
//   recompute_share    of the step, recomputing segments
#include <benchmark/benchmark.h>

#include <chrono>
#include <ctime>
#include <optional>
#include <vector>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/memory_plan.h"

namespace zero {
namespace {

const GptConfig kModel{.n_layer = 8, .n_head = 8, .d_model = 256, .vocab_size = 4096, .seq_len = 128};
constexpr int64_t kMicroBatch = 4;

EngineConfig config(int64_t segments) {
  EngineConfig e;
  e.micro_batch_size = kMicroBatch;
  e.optimizer = {.type = OptimizerType::kAdamW, .lr = 3e-4f};
  if (segments > 0) e.activation_checkpointing.number_checkpoints = segments;
  return e;
}

class Stepper {
 public:
  Stepper(Backend& backend, int64_t segments) : ids_(kMicroBatch * kModel.seq_len), targets_(ids_.size()) {
    auto e = initialize(std::make_unique<Gpt>(kModel), config(segments), backend);
    if (e.ok()) engine_ = std::move(*e);
    else error_ = std::string(e.status().message());
    for (size_t i = 0; i < ids_.size(); ++i) {
      ids_[i] = static_cast<int32_t>((i * 7919) % kModel.vocab_size);
      targets_[i] = static_cast<int32_t>((i * 7919 + 1) % kModel.vocab_size);
    }
  }
  bool ok() const { return engine_ != nullptr; }
  const std::string& error() const { return error_; }

  // One optimizer step; returns its wall time, adds its CPU time and its
  // recompute time.
  double step() {
    const std::clock_t c0 = std::clock();
    const Batch batch{Tensor::wrap(ids_.data(), {kMicroBatch, kModel.seq_len}, DType::kI32),
                      Tensor::wrap(targets_.data(), {kMicroBatch, kModel.seq_len}, DType::kI32)};
    const auto t0 = std::chrono::steady_clock::now();
    engine_->forward(batch).value();
    (void)engine_->backward();
    absl::StatusOr<StepResult> r = engine_->step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.ok()) recompute_s_ += r->recompute_s;
    cpu_s_ += static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    return s;
  }
  // Peak activation bytes of one step.
  int64_t activation_peak() {
    MemoryTracker::global().reset_peaks();
    const int64_t before = MemoryTracker::global().snapshot().at(Tier::kHost, MemCategory::kActivations).current;
    step();
    return MemoryTracker::global().snapshot().at(Tier::kHost, MemCategory::kActivations).peak - before;
  }
  double recompute_s() const { return recompute_s_; }
  double cpu_s() const { return cpu_s_; }

 private:
  std::unique_ptr<Engine> engine_;
  std::string error_;
  std::vector<int32_t> ids_, targets_;
  double recompute_s_ = 0, cpu_s_ = 0;
};

void BM_ActivationCheckpointing(benchmark::State& state) {
  const int64_t k = state.range(0);
  CpuBackend backend;
  Stepper ckpt(backend, k), none(backend, 0);
  if (!ckpt.ok() || !none.ok()) {
    state.SkipWithError((ckpt.error() + none.error()).c_str());
    return;
  }
  ckpt.step();  // warm-up: primitive creation, first touch
  none.step();
  const int64_t peak = ckpt.activation_peak();
  const int64_t peak_none = none.activation_peak();
  PlanInput in;
  in.model = kModel;
  in.micro_batch = kMicroBatch;
  in.engine = config(k);
  const int64_t planned = plan_memory(in).value().at(Tier::kHost, MemCategory::kActivations);

  double seconds = 0, seconds_none = 0;
  const double recompute_before = ckpt.recompute_s();
  const double cpu_before = ckpt.cpu_s(), cpu_none_before = none.cpu_s();
  for (auto _ : state) {
    const double s = ckpt.step();
    state.SetIterationTime(s);
    seconds += s;
    state.PauseTiming();
    seconds_none += none.step();  // interleaved: same machine conditions
    state.ResumeTiming();
  }
  const double n = static_cast<double>(state.iterations());
  constexpr double kMiB = 1024.0 * 1024.0;
  state.counters["act_peak_MiB"] = static_cast<double>(peak) / kMiB;
  state.counters["act_planned_MiB"] = static_cast<double>(planned) / kMiB;
  state.counters["act_vs_none"] = static_cast<double>(peak) / static_cast<double>(peak_none);
  state.counters["step_s"] = seconds / n;
  state.counters["ratio_to_none"] = seconds / seconds_none;
  state.counters["cpu_ratio_to_none"] = (ckpt.cpu_s() - cpu_before) / (none.cpu_s() - cpu_none_before);
  state.counters["recompute_share"] = (ckpt.recompute_s() - recompute_before) / seconds;
}

void register_all() {
  auto* b = benchmark::RegisterBenchmark("BM_ActivationCheckpointing", BM_ActivationCheckpointing);
  for (int64_t k = 0; k <= kModel.n_layer; ++k) b->Arg(k);
  b->ArgName("segments")->UseManualTime()->Iterations(6)->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  zero::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;  // a mistyped flag is not ignored
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
