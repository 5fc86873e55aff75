// A mixture of experts' training step against a dense model with the same
// active parameters, in one process, steps alternated (so both see the same
// machine conditions):
//
//  * BM_MoeVsDense/<experts>x<top_k>: a Mixtral-shaped model (d_model 512, 4
//    blocks, 8 query heads over 4 key/value heads, vocabulary 8192, seq 256,
//    micro-batch 4: 1024 tokens) whose blocks each hold <experts> SwiGLU
//    experts of width 1024, <top_k> per token, dropless; the dense model is
//    the same with one SwiGLU MLP of width top_k x 1024, so a token passes
//    through the same MLP parameters (the router's E x d_model aside).
//    Counters: each model's tokens/s (forward, backward and AdamW, fp32),
//    moe_over_dense (the MoE's tokens/s over the dense one's: 1 would be
//    routing for free), flops_ratio (the MoE's training FLOPs per token over
//    the dense one's: what moe_over_dense would be if time followed FLOPs),
//    each step's forward/backward/optimizer split, and both models'
//    parameter counts (total and active).
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

constexpr int64_t kMicro = 4, kSeq = 256;

GptConfig dense_model(int64_t d_ff) {
  GptConfig g{.arch = ModelArch::kLlama, .n_layer = 4, .n_head = 8, .d_model = 512, .vocab_size = 8192,
              .seq_len = kSeq};
  g.n_kv_head = 4;
  g.d_ff = d_ff;
  return g;
}

GptConfig moe_model(int64_t experts, int64_t top_k) {
  GptConfig g = dense_model(1024);
  g.arch = ModelArch::kMixtral;
  g.moe.num_experts = experts;
  g.moe.top_k = top_k;
  g.moe.expert_d_ff = 1024;
  g.moe.aux_loss_coef = 0.02f;
  return g;
}

struct Timed {
  std::unique_ptr<Engine> engine;
  double seconds[3] = {0, 0, 0};  // forward, backward, step
  std::vector<double> step_seconds;
};

void BM_MoeVsDense(benchmark::State& state, int64_t experts, int64_t top_k) {
  CpuBackend backend;
  EngineConfig ec;
  ec.micro_batch_size = kMicro;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 3e-4f};
  const GptConfig moe = moe_model(experts, top_k), dense = dense_model(top_k * 1024);
  Timed runs[2];
  const GptConfig* models[2] = {&moe, &dense};
  for (int i = 0; i < 2; ++i) {
    auto e = initialize(std::make_unique<Gpt>(*models[i]), ec, backend);
    if (!e.ok()) {
      state.SkipWithError(std::string(e.status().message()).c_str());
      return;
    }
    runs[i].engine = *std::move(e);
  }
  const int64_t tokens = kMicro * kSeq;
  std::vector<int32_t> ids(tokens), targets(tokens);
  for (int64_t i = 0; i < tokens; ++i) {
    ids[i] = static_cast<int32_t>((i * 7919 + i / 13) % dense.vocab_size), targets[i] = ids[(i + 1) % tokens];
  }
  const Batch batch{Tensor::wrap(ids.data(), {kMicro, kSeq}, DType::kI32),
                    Tensor::wrap(targets.data(), {kMicro, kSeq}, DType::kI32)};
  auto step = [&](Timed& t, bool timed) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    t.engine->forward(batch).value();
    const auto t1 = clock::now();
    ZE_CHECK_OK(t.engine->backward());
    const auto t2 = clock::now();
    (void)t.engine->step();
    const auto t3 = clock::now();
    if (!timed) return std::chrono::duration<double>(t3 - t0).count();
    t.seconds[0] += std::chrono::duration<double>(t1 - t0).count();
    t.seconds[1] += std::chrono::duration<double>(t2 - t1).count();
    t.seconds[2] += std::chrono::duration<double>(t3 - t2).count();
    t.step_seconds.push_back(std::chrono::duration<double>(t3 - t0).count());
    return t.step_seconds.back();
  };
  for (Timed& t : runs) step(t, false), step(t, false);  // warm-up: primitives, first touch, the allocator
  for (auto _ : state) {
    const double s = step(runs[0], true);
    state.SetIterationTime(s);
    state.PauseTiming();
    step(runs[1], true);  // interleaved: same machine conditions
    state.ResumeTiming();
  }
  const double per_token_flops[2] = {moe.flops_per_token(kSeq), dense.flops_per_token(kSeq)};
  const char* const names[2] = {"moe", "dense"};
  double tokens_per_s[2];
  for (int i = 0; i < 2; ++i) {
    const double n = static_cast<double>(runs[i].step_seconds.size());
    tokens_per_s[i] = static_cast<double>(tokens) / bench::median(runs[i].step_seconds);
    state.counters[std::string(names[i]) + "_tok/s"] = tokens_per_s[i];
    state.counters[std::string(names[i]) + "_fwd_s"] = runs[i].seconds[0] / n;
    state.counters[std::string(names[i]) + "_bwd_s"] = runs[i].seconds[1] / n;
    state.counters[std::string(names[i]) + "_opt_s"] = runs[i].seconds[2] / n;
  }
  state.counters["moe_over_dense"] = tokens_per_s[0] / tokens_per_s[1];
  state.counters["flops_ratio"] = per_token_flops[0] / per_token_flops[1];
  state.counters["moe_params_M"] = static_cast<double>(moe.num_parameters()) / 1e6;
  state.counters["moe_active_M"] = static_cast<double>(moe.active_parameters()) / 1e6;
  state.counters["dense_params_M"] = static_cast<double>(dense.num_parameters()) / 1e6;
}

void register_all() {
  for (const auto& [experts, top_k] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {16, 2}, {8, 1}}) {
    const std::string name = "BM_MoeVsDense/" + std::to_string(experts) + "x" + std::to_string(top_k);
    benchmark::RegisterBenchmark(name.c_str(),
                                 [experts, top_k](benchmark::State& st) { BM_MoeVsDense(st, experts, top_k); })
        ->UseManualTime()
        ->Iterations(5)
        ->Unit(benchmark::kMillisecond);
  }
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
