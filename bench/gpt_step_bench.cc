// GEMM rates and full GPT training steps, with the step's FLOP rate reported as
// a ratio to the GEMM rate measured in the same process.
//
//  * BM_Gemm/<shape>/<dtype>: every GEMM of a GPT-2 124M training step at
//    micro-batch 4, seq 64 (256 tokens): forward y = x W^T, backward dX = dY W
//    and dW += dY^T X, for the qkv, attention-projection, MLP and LM-head
//    shapes; fp32, and bf16 as the engine runs it (bf16 activations, weights
//    and gradients, fp32 accumulation). BM_Gemm/<shape>/<dtype>/<fwd|dgrad|
//    wgrad> times each of the three alone. Counters: GFLOP/s, and its ratio to
//    the arithmetic peak (bench/fma_peak.h) measured just before, in the same
//    process. bench/peers/gemm_vs_torch.py runs these beside PyTorch's GEMMs
//    of the same shapes, interleaved, for the per-shape table in docs/benchmarks.md.
//  * BM_GptStep/<dtype>: one optimizer step of configs/gpt2-124m.json's model
//    (forward, backward, AdamW) on synthetic tokens. Counters: achieved
//    GFLOP/s (6 x parameters x tokens + 12 x layers x d_model x seq x tokens),
//    the fp32 GEMM rate of the same step's GEMM set measured between steps in
//    this run, their ratio (and median_ratio_to_gemm, the median of each
//    step's ratio to the GEMM set timed after it: robust to one noisy
//    measurement), the peak tracked memory, and the step's forward,
//    backward and optimizer seconds (fwd_s, bwd_s, opt_s) beside gemm_s, its
//    FLOPs at the GEMM rate.
//  * BM_LlamaStep/bf16: the same for a Llama-shaped 1B (d_model 2048, 16
//    blocks, 32 query heads over 8 key/value heads, SwiGLU 8192, vocabulary
//    32000 tied, seq 256, micro-batch 1) in bf16 with DeepSpeed's bf16 master
//    weights and optimizer states (10 bytes per parameter, so it fits the
//    24 GiB machine); its ratio is to the bf16 GEMM rate of its own Linear
//    shapes in the same run: the fused q/k/v [(H + 2 G) D, C], o, the fused
//    gate/up [2 d_ff, C], down and the head (graph/transformer.h).
#include <benchmark/benchmark.h>

#include <chrono>
#include <iterator>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/stats.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"

namespace zero {
namespace {

constexpr int64_t kTokens = 256;  // micro-batch 4 x seq 64 (GPT-2), 1 x 256 (Llama)
const GptConfig kGpt2{.n_layer = 12, .n_head = 12, .d_model = 768, .vocab_size = 50304, .seq_len = 64};
const GptConfig kLlama1B{.arch = ModelArch::kLlama, .n_layer = 16, .n_head = 32, .d_model = 2048, .vocab_size = 32000,
                         .seq_len = 256, .n_kv_head = 8, .d_ff = 8192, .rope_theta = 500000.0,
                         .tie_word_embeddings = true};

struct GemmShape {
  std::string name;
  int64_t out, in;  // weight [out, in]
  int64_t per_step; // occurrences per training step
};
const GemmShape kShapes[] = {{"qkv", 2304, 768, 12},
                             {"attn_proj", 768, 768, 12},
                             {"fc", 3072, 768, 12},
                             {"fc_proj", 768, 3072, 12},
                             {"lm_head", 50304, 768, 1}};

// Every Linear of a model's training step, by shape.
std::vector<GemmShape> step_shapes(const GptConfig& g) {
  const int64_t c = g.d_model, l = g.n_layer, f = g.ffn_width();
  if (!g.rope()) return std::vector<GemmShape>(std::begin(kShapes), std::end(kShapes));
  const int64_t a = g.attention_width(), qkv = a + 2 * g.kv_heads() * g.head_dim();
  return {{"qkv", qkv, c, l}, {"o", c, a, l}, {"gate_up", 2 * f, c, l}, {"down", c, f, l},
          {"lm_head", g.vocab_size, c, 1}};
}

// The three GEMMs of one Linear layer's forward and backward.
struct LinearGemms {
  Tensor x, w, y, dy, dx, dw;
  LinearGemms(Backend& b, const GemmShape& s, DType wdtype)
      : x(b.zeros({kTokens, s.in}, wdtype, MemCategory::kActivations)),
        w(b.zeros({s.out, s.in}, wdtype, MemCategory::kParameters)),
        y(b.zeros({kTokens, s.out}, wdtype, MemCategory::kActivations)),
        dy(b.zeros({kTokens, s.out}, wdtype, MemCategory::kActivations)),
        dx(b.zeros({kTokens, s.in}, wdtype, MemCategory::kActivations)),
        dw(b.zeros({s.out, s.in}, wdtype, MemCategory::kGradients)) {
    b.ops().fill(x, 0.01f);
    b.ops().fill(w, 0.02f);
    b.ops().fill(dy, 0.001f);
  }
  // kind: 0 forward, 1 data gradient, 2 weight gradient; -1 all three.
  void run(Ops& ops, DType compute, int kind = -1) {
    if (kind < 0 || kind == 0) ops.matmul(x, w, y, {.trans_b = true, .compute = compute});
    if (kind < 0 || kind == 1) ops.matmul(dy, w, dx, {.compute = compute});
    if (kind < 0 || kind == 2) ops.matmul(dy, x, dw, {.trans_a = true, .accumulate = true, .compute = compute});
  }
  static double flops(const GemmShape& s) { return 3 * 2.0 * kTokens * s.in * s.out; }
};

void BM_Gemm(benchmark::State& state, const GemmShape& shape, DType dtype, int kind) {
  CpuBackend backend;
  LinearGemms g(backend, shape, dtype);
  const double peak = bench::fma_peak_gflops(dtype);  // just before: the same clock and neighbours
  g.run(backend.ops(), dtype, kind);                  // primitive creation
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    g.run(backend.ops(), dtype, kind);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double flops = LinearGemms::flops(shape) / (kind < 0 ? 1 : 3);
  const double rate = flops * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["GFLOP/s"] = rate;
  if (peak > 0) {
    state.counters["peak_GFLOP/s"] = peak;
    state.counters["ratio_to_peak"] = rate / peak;
  }
}

// All GEMMs of one training step in `dtype`, timed together: the "GEMM rate of the same shapes".
class StepGemmSet {
 public:
  StepGemmSet(Backend& b, const GptConfig& g, DType dtype) : shapes_(step_shapes(g)), dtype_(dtype) {
    for (const GemmShape& s : shapes_) {
      gemms_.emplace_back(b, s, dtype);
      flops_ += LinearGemms::flops(s) * s.per_step;
    }
  }
  // Returns seconds for one step's worth of GEMMs.
  double time_once(Ops& ops) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < gemms_.size(); ++i)
      for (int64_t k = 0; k < shapes_[i].per_step; ++k) gemms_[i].run(ops, dtype_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double flops() const { return flops_; }

 private:
  std::vector<GemmShape> shapes_;
  DType dtype_;
  std::vector<LinearGemms> gemms_;
  double flops_ = 0;
};

// gemm_dtype: the dtype of the GEMM set the step is compared with.
void BM_Step(benchmark::State& state, const GptConfig& model, int64_t micro, EngineConfig ec, DType gemm_dtype) {
  CpuBackend backend;
  ec.micro_batch_size = micro;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.1f};
  auto engine = initialize(std::make_unique<Gpt>(model), ec, backend);
  if (!engine.ok()) {
    state.SkipWithError(std::string(engine.status().message()).c_str());
    return;
  }
  const int64_t seq = kTokens / micro;
  std::vector<int32_t> ids(kTokens), targets(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) {
    ids[i] = static_cast<int32_t>((i * 7919) % model.vocab_size), targets[i] = ids[(i + 1) % kTokens];
  }
  const Batch batch{Tensor::wrap(ids.data(), {micro, seq}, DType::kI32),
                    Tensor::wrap(targets.data(), {micro, seq}, DType::kI32)};
  double phase_seconds[3] = {0, 0, 0};  // forward, backward, optimizer step: summed over the timed steps
  double phase_faults[3] = {0, 0, 0};   // minor page faults (memory the step touches for the first time)
  using bench::minor_page_faults;
  auto step = [&] {
    using clock = std::chrono::steady_clock;
    const double f0 = minor_page_faults();
    const auto t0 = clock::now();
    (*engine)->forward(batch).value();
    const auto t1 = clock::now();
    const double f1 = minor_page_faults();
    ZE_CHECK_OK((*engine)->backward());
    const auto t2 = clock::now();
    const double f2 = minor_page_faults();
    (void)(*engine)->step();
    const auto t3 = clock::now();
    const double f3 = minor_page_faults();
    phase_faults[0] += f1 - f0, phase_faults[1] += f2 - f1, phase_faults[2] += f3 - f2;
    phase_seconds[0] += std::chrono::duration<double>(t1 - t0).count();
    phase_seconds[1] += std::chrono::duration<double>(t2 - t1).count();
    phase_seconds[2] += std::chrono::duration<double>(t3 - t2).count();
  };
  step();  // warm-up: primitive creation, first-touch of activations
  MemoryTracker::global().reset_peaks();
  step();
  const int64_t peak_bytes = MemoryTracker::global().snapshot().allocated[0].peak;  // the step alone
  StepGemmSet gemms(backend, model, gemm_dtype);
  gemms.time_once(backend.ops());
  for (double& p : phase_seconds) p = 0;
  for (double& p : phase_faults) p = 0;
  double step_seconds = 0, gemm_seconds = 0;
  std::vector<double> pair_ratios;  // each step's time over its neighbouring GEMM set's, scaled by FLOPs
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    step_seconds += s;
    state.PauseTiming();
    const double g = gemms.time_once(backend.ops());  // interleaved: same machine conditions
    gemm_seconds += g;
    pair_ratios.push_back(g / s);
    state.ResumeTiming();
  }
  const double n = static_cast<double>(state.iterations());
  const double step_flops = model.flops_per_token(seq) * kTokens;
  const double achieved = step_flops * n / step_seconds;
  const double gemm_rate = gemms.flops() * n / gemm_seconds;
  state.counters["step_s"] = step_seconds / n;
  state.counters["fwd_s"] = phase_seconds[0] / n;
  state.counters["bwd_s"] = phase_seconds[1] / n;
  state.counters["opt_s"] = phase_seconds[2] / n;
  state.counters["fwd_faults"] = phase_faults[0] / n;
  state.counters["bwd_faults"] = phase_faults[1] / n;
  state.counters["opt_faults"] = phase_faults[2] / n;
  state.counters["gemm_s"] = step_flops / gemm_rate;  // the step's FLOPs at the GEMM rate: the step's floor
  state.counters["GFLOP/s"] = achieved / 1e9;
  state.counters[std::string("gemm_") + std::string(dtype_name(gemm_dtype)) + "_GFLOP/s"] = gemm_rate / 1e9;
  state.counters["ratio_to_gemm"] = achieved / gemm_rate;
  // The same per step, its median: one slow GEMM-set or step measurement on a
  // noisy host moves ratio_to_gemm (a ratio of sums), not this.
  state.counters["median_ratio_to_gemm"] = bench::median(pair_ratios) * step_flops / gemms.flops();
  state.counters["peak_MiB"] = static_cast<double>(peak_bytes) / (1024.0 * 1024.0);
  state.counters["peak_GiB"] = static_cast<double>(peak_bytes) / (1024.0 * 1024.0 * 1024.0);  // docs/benchmarks.md's unit
  state.counters["params_M"] = static_cast<double>(model.num_parameters()) / 1e6;
}

void register_all() {
  for (const GemmShape& s : kShapes) {
    for (DType d : {DType::kF32, DType::kBF16}) {
      const std::string name = "BM_Gemm/" + s.name + "/" + std::string(dtype_name(d));
      benchmark::RegisterBenchmark(name.c_str(), [s, d](benchmark::State& st) { BM_Gemm(st, s, d, -1); })
          ->Unit(benchmark::kMillisecond);
      for (int kind = 0; kind < 3; ++kind) {
        static const char* const kKinds[] = {"fwd", "dgrad", "wgrad"};
        benchmark::RegisterBenchmark((name + "/" + kKinds[kind]).c_str(),
                                     [s, d, kind](benchmark::State& st) { BM_Gemm(st, s, d, kind); })
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  for (DType d : {DType::kF32, DType::kBF16}) {
    EngineConfig ec;
    ec.param_dtype = d;
    benchmark::RegisterBenchmark((std::string("BM_GptStep/") + std::string(dtype_name(d))).c_str(),
                                 [ec](benchmark::State& st) { BM_Step(st, kGpt2, 4, ec, DType::kF32); })
        ->UseManualTime()
        ->Iterations(5)
        ->Unit(benchmark::kMillisecond);
  }
  EngineConfig llama;
  llama.param_dtype = DType::kBF16;
  llama.zero.stage = ZeroStage::k1;  // 16-bit master weights live in the ZeRO optimizer (one rank: nothing sharded)
  llama.optimizer_precision = {.master = DType::kBF16, .states = DType::kBF16};
  benchmark::RegisterBenchmark("BM_LlamaStep/bf16",
                               [llama](benchmark::State& st) { BM_Step(st, kLlama1B, 1, llama, DType::kBF16); })
      ->UseManualTime()
      ->Iterations(3)
      ->Unit(benchmark::kMillisecond);
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
