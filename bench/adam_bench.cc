// CPU AdamW against the memory-bandwidth ceiling, on 64 Mi fp32 parameters
// with 2 OpenMP threads (this machine's cores). An Adam step is memory bound:
// it reads p, g, m, v and writes p, m, v (28 bytes per parameter; 30 with the
// fused bf16 parameter copy).
//
// The ceiling is "adam_streams": Adam's own traffic (read p, g, m, v; write
// p, m, v in place) with one multiply-add instead of Adam's arithmetic. A
// second reference, the in-place STREAM-style kernel b[i] += k * c[i]
// (12 bytes per element), runs before every measured step; it is not a
// ceiling for Adam (fewer streams keep fewer misses in flight here, so Adam
// can move more bytes per second than it), only a gauge of the host's state.
//
// Each iteration runs the STREAM kernel and then the measured kernel back to
// back, so a noisy host slows both; counters are medians over the
// iterations:
//  * stream_GBps: the STREAM-style kernel;
//  * step_ms, Gparams_per_s, GBps: the measured kernel (GBps at 28 or 30
//    bytes per parameter; 16 for the bf16-master variant);
//  * ratio_to_stream: GBps / stream_GBps.
// Variants: "simd_fp32" (our kernel table, fp32 grads, no parameter copy),
// "simd_bf16_copy" (same, plus the fused bf16 parameter write), "scalar_loop"
// (a plain single-pass loop, not vectorised, same OpenMP split), and
// "adam_streams" (the ceiling above); "optimizer_bf16_master":
// the engine's optimizer (kernels/optimizer.h) over bf16 master
// weights and bf16 states with bf16 gradients and the bf16 parameter copy
// (bf16_master_weights_and_grads + bf16_optimizer_states): 16 bytes per
// parameter, each piece widened to fp32 staging, stepped and narrowed back.
//
// `adam_bench --step_server` serves single steps of simd_fp32 and
// adam_streams over a pipe, so that bench/peers/adam_vs_deepspeed.py can
// alternate them one by one with DeepSpeed's CPU Adam in its own process.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "bench/stats.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/optimizer.h"

namespace zero {
namespace {

constexpr int64_t kNumel = int64_t{64} << 20;
// OpenMP threads for every kernel here: 2 (this machine's cores), or the
// step server's --threads.
int g_threads = 2;
constexpr double kStreamBytesPerElem = 12.0;

// [begin, end) of this thread's contiguous share, a multiple of 16 elements
// except the last (the split parallel_lanes uses for our kernels).
void thread_range(int64_t n, int64_t& begin, int64_t& end) {
  const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
  const int64_t per = (n / nt) / 16 * 16;
  begin = t * per;
  end = t == nt - 1 ? n : begin + per;
}

__attribute__((target("avx512f"), noinline)) void stream_range(float* b, const float* c, float k,
                                                                int64_t begin, int64_t end) {
  const __m512 kv = _mm512_set1_ps(k);
  int64_t i = begin;
  for (; i + 64 <= end; i += 64) {
    __m512 b0 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(c + i), _mm512_loadu_ps(b + i));
    __m512 b1 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(c + i + 16), _mm512_loadu_ps(b + i + 16));
    __m512 b2 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(c + i + 32), _mm512_loadu_ps(b + i + 32));
    __m512 b3 = _mm512_fmadd_ps(kv, _mm512_loadu_ps(c + i + 48), _mm512_loadu_ps(b + i + 48));
    _mm512_storeu_ps(b + i, b0);
    _mm512_storeu_ps(b + i + 16, b1);
    _mm512_storeu_ps(b + i + 32, b2);
    _mm512_storeu_ps(b + i + 48, b3);
  }
  for (; i < end; ++i) b[i] += k * c[i];
}

// b[i] += k * c[i] with AVX-512, one contiguous range per thread.
void stream_inplace(float* b, const float* c, float k, int64_t n) {
#pragma omp parallel num_threads(g_threads)
  {
    int64_t begin, end;
    thread_range(n, begin, end);
    stream_range(b, c, k, begin, end);
  }
}

__attribute__((target("avx512f"), noinline)) void adam_streams_range(float* p, const float* g,
                                                                      float* m, float* v, float k,
                                                                      int64_t begin, int64_t end) {
  const __m512 kv = _mm512_set1_ps(k);
  int64_t i = begin;
  // All four loads of a vector before its three stores (a store issued
  // between two loads made this loop ~7% slower than Adam's own, which loads
  // everything first: a ceiling below the kernel it bounds is no ceiling).
  for (; i + 16 <= end; i += 16) {
    const __m512 gi = _mm512_loadu_ps(g + i), pi = _mm512_loadu_ps(p + i);
    const __m512 mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i);
    const __m512 gk = _mm512_mul_ps(kv, gi);
    _mm512_storeu_ps(p + i, _mm512_add_ps(pi, gk));
    _mm512_storeu_ps(m + i, _mm512_add_ps(mi, gk));
    _mm512_storeu_ps(v + i, _mm512_add_ps(vi, gk));
  }
  for (; i < end; ++i) p[i] += k * g[i], m[i] += k * g[i], v[i] += k * g[i];
}

// Reads p, g, m, v and writes p, m, v, like an Adam step, with one multiply.
void adam_streams(float* p, const float* g, float* m, float* v, int64_t n) {
#pragma omp parallel num_threads(g_threads)
  {
    int64_t begin, end;
    thread_range(n, begin, end);
    adam_streams_range(p, g, m, v, 1e-7f, begin, end);
  }
}

// The textbook loop: one pass, DeepSpeed's order of operations, no intrinsics
// and auto-vectorisation off (what a -O2 build of a plain C loop gives).
__attribute__((optimize("no-tree-vectorize"), noinline)) void scalar_adamw_range(
    float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, float b1, float b2,
    float eps, float step_size, float decay, float bc2_rsqrt) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    const float denom = std::sqrt(vi) * bc2_rsqrt + eps;
    float pi = p[i];
    pi += decay * pi;
    pi += step_size * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

void scalar_adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const float bc1 = static_cast<float>(1.0 - std::pow(h.beta1, t));
  const float bc2_rsqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t)));
#pragma omp parallel num_threads(g_threads)
  {
    int64_t begin, end;
    thread_range(n, begin, end);
    scalar_adamw_range(p, g, m, v, begin, end, h.beta1, h.beta2, h.eps, -h.lr / bc1,
                       -h.lr * h.weight_decay, bc2_rsqrt);
  }
}

// n elements, 64-byte aligned (fill() first-touches them with the kernels' thread split).
struct Buffer {
  explicit Buffer(int64_t n, size_t elem_bytes)
      : data(std::aligned_alloc(64, (static_cast<size_t>(n) * elem_bytes + 63) / 64 * 64)) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data); }
  float* f32() { return static_cast<float*>(data); }
  void* data;
};

void fill(float* x, int64_t n, float scale, uint32_t seed) {
#pragma omp parallel num_threads(g_threads)
  {
    int64_t begin, end;
    thread_range(n, begin, end);
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t h = (static_cast<uint32_t>(i) ^ seed) * 2654435761u;
      x[i] = scale * (static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f);
    }
  }
}

enum Variant { kSimdF32, kSimdBf16Copy, kScalarLoop, kAdamStreams, kNarrowBf16 };

using bench::median;

void BM_AdamW(benchmark::State& state, Variant variant) {
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("the STREAM-style ceiling kernel needs AVX-512");
    return;
  }
  omp_set_num_threads(g_threads);
  const cpu::SimdKernels& k = cpu::simd_kernels();
  Buffer p(kNumel, 4), g(kNumel, 4), m(kNumel, 4), v(kNumel, 4), copy(kNumel, 2);
  Buffer sb(kNumel, 4), sc(kNumel, 4);
  fill(p.f32(), kNumel, 2.0f, 1);
  fill(g.f32(), kNumel, 0.02f, 2);
  fill(m.f32(), kNumel, 0.002f, 3);
  fill(v.f32(), kNumel, 0.0f, 4);  // v = 0 everywhere: the state of a first step
  fill(sb.f32(), kNumel, 1.0f, 5);
  fill(sc.f32(), kNumel, 1.0f, 6);
  fill(static_cast<float*>(copy.data), kNumel / 2, 1.0f, 7);

  AdamWHyper h;
  h.lr = 1e-4f;
  h.weight_decay = 0.01f;  // AdamW with decoupled decay, the usual configuration
  const double bytes_per_param = variant == kSimdBf16Copy ? 30.0 : variant == kNarrowBf16 ? 16.0 : 28.0;
  // The narrow variant's arrays: bf16 copies of the same values.
  CpuBackend backend;
  OptimizerConfig oc;
  oc.type = OptimizerType::kAdamW;
  oc.weight_decay = h.weight_decay;
  std::unique_ptr<Optimizer> narrow;
  Tensor np, ng, nm, nv, ncopy;
  if (variant == kNarrowBf16) {
    narrow = make_optimizer(oc, backend, {DType::kBF16, DType::kBF16}).value();
    auto bf16_of = [&](float* src) {
      Tensor t = backend.empty({kNumel}, DType::kBF16, MemCategory::kOptimizerState);
      backend.ops().cast(Tensor::wrap(src, {kNumel}, DType::kF32), t);
      return t;
    };
    np = bf16_of(p.f32()), ng = bf16_of(g.f32()), nm = bf16_of(m.f32()), nv = bf16_of(v.f32());
    ncopy = Tensor::wrap(copy.data, {kNumel}, DType::kBF16);
  }
  Optimizer::StepArgs args;
  args.lr = h.lr;

  auto step = [&] {
    switch (variant) {
      case kSimdF32:
        k.adamw(p.f32(), g.data, DType::kF32, m.f32(), v.f32(), nullptr, DType::kF32, kNumel, h);
        break;
      case kSimdBf16Copy:
        k.adamw(p.f32(), g.data, DType::kF32, m.f32(), v.f32(), copy.data, DType::kBF16, kNumel, h);
        break;
      case kScalarLoop:
        scalar_adamw(p.f32(), g.f32(), m.f32(), v.f32(), kNumel, h);
        break;
      case kAdamStreams:
        adam_streams(p.f32(), g.f32(), m.f32(), v.f32(), kNumel);
        break;
      case kNarrowBf16: {
        const Tensor states[] = {nm, nv};
        args.step = h.step;
        narrow->step(np, ng, states, ncopy, args);
        break;
      }
    }
  };
  // Warm up both kernels (thread pool, page tables).
  stream_inplace(sb.f32(), sc.f32(), 1e-7f, kNumel);
  step();

  std::vector<double> stream_s, step_s, ratio;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    stream_inplace(sb.f32(), sc.f32(), 1e-7f, kNumel);
    const auto t1 = std::chrono::steady_clock::now();
    ++h.step;
    step();
    const auto t2 = std::chrono::steady_clock::now();
    const double s_stream = std::chrono::duration<double>(t1 - t0).count();
    const double s_step = std::chrono::duration<double>(t2 - t1).count();
    stream_s.push_back(s_stream);
    step_s.push_back(s_step);
    ratio.push_back((bytes_per_param / s_step) / (kStreamBytesPerElem / s_stream));
    state.SetIterationTime(s_step);
  }
  benchmark::DoNotOptimize(p.f32()[kNumel / 3]);
  benchmark::DoNotOptimize(sb.f32()[kNumel / 3]);

  const double n = static_cast<double>(kNumel);
  const double step_med = median(step_s), stream_med = median(stream_s);
  state.counters["threads"] = g_threads;
  state.counters["stream_GBps"] = kStreamBytesPerElem * n / stream_med * 1e-9;
  state.counters["step_ms"] = 1e3 * step_med;
  state.counters["Gparams_per_s"] = n / step_med * 1e-9;
  state.counters["GBps"] = bytes_per_param * n / step_med * 1e-9;
  state.counters["ratio_to_stream"] = median(ratio);
}

BENCHMARK_CAPTURE(BM_AdamW, simd_fp32, kSimdF32)
    ->UseManualTime()->Iterations(25)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AdamW, simd_bf16_copy, kSimdBf16Copy)
    ->UseManualTime()->Iterations(25)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AdamW, scalar_loop, kScalarLoop)
    ->UseManualTime()->Iterations(8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AdamW, adam_streams, kAdamStreams)
    ->UseManualTime()->Iterations(25)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AdamW, optimizer_bf16_master, kNarrowBf16)
    ->UseManualTime()->Iterations(25)->Unit(benchmark::kMillisecond);

// --step_server [--threads N]: for a peer measured step by step in another
// process (bench/peers/adam_vs_deepspeed.py), on N threads (default 2).
// Reads one word per line from stdin --
// "adamw" (our kernel, fp32, the simd_fp32 variant) or "ceiling"
// (adam_streams) -- runs that one step over kNumel elements and answers its
// seconds on stdout, so the two programs' steps alternate one by one and a
// shared host's noise falls on both alike.
int step_server() {
  omp_set_num_threads(g_threads);
  const cpu::SimdKernels& k = cpu::simd_kernels();
  Buffer p(kNumel, 4), g(kNumel, 4), m(kNumel, 4), v(kNumel, 4);
  fill(p.f32(), kNumel, 2.0f, 1);
  fill(g.f32(), kNumel, 0.02f, 2);
  fill(m.f32(), kNumel, 0.002f, 3);
  fill(v.f32(), kNumel, 0.0f, 4);
  AdamWHyper h;
  h.lr = 1e-4f;
  h.weight_decay = 0.01f;
  std::string word;
  while (std::getline(std::cin, word)) {
    const auto t0 = std::chrono::steady_clock::now();
    if (word == "adamw") {
      ++h.step;
      k.adamw(p.f32(), g.data, DType::kF32, m.f32(), v.f32(), nullptr, DType::kF32, kNumel, h);
    } else if (word == "ceiling") {
      adam_streams(p.f32(), g.f32(), m.f32(), v.f32(), kNumel);
    } else {
      std::cerr << "adam_bench --step_server: unknown request '" << word << "' (adamw or ceiling)\n";
      return 2;
    }
    std::cout << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--step_server") {
    const bool threads_given = argc == 4 && std::string(argv[2]) == "--threads";
    if (threads_given) zero::g_threads = std::atoi(argv[3]);
    if ((argc != 2 && !threads_given) || zero::g_threads < 1) {
      std::cerr << "usage: adam_bench --step_server [--threads N]  (N >= 1)\n";
      return 2;
    }
    if (!__builtin_cpu_supports("avx512f")) {
      std::cerr << "adam_bench: the ceiling kernel needs AVX-512\n";
      return 1;
    }
    return zero::step_server();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
