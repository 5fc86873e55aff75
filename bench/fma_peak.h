// The machine's arithmetic ceiling for the GEMM benchmarks: independent
// chains of 512-bit fp32 FMAs (32 FLOP each) or AVX512-BF16 dot products
// (vdpbf16ps: 16 lanes x 2 bf16 products summed into fp32, 64 FLOP), on every
// OpenMP thread, with no memory traffic. Twelve accumulators per thread hide
// the instruction latency on the cores we run on (4 cycles, 2 pipes), so the
// loop runs at the issue rate: the FLOP rate no GEMM kernel can exceed on a
// CPU without AMX. Where AMX is present (oneDNN's bf16 GEMMs use its tiles,
// far faster than vdpbf16ps), there is no bf16 figure: 0. The FLOPs of one
// instruction and the CPU flags come from kernels/cpu/cpu_peak.h, which also
// computes the ISA x clock peak zero-train's MFU is taken against.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/cpu/cpu_peak.h"

namespace zero::bench {

namespace fma_peak_detail {

constexpr int kChains = 12;

// The accumulators' sum, so the loop is not dead code.
__attribute__((target("avx512f"))) inline float sum_lanes(const __m512 (&acc)[kChains]) {
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float total = 0;
  for (float x : lanes) total += x;
  return total;
}

__attribute__((target("avx512f"), noinline)) inline float fp32_chains(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  return sum_lanes(acc);
}

__attribute__((target("avx512f,avx512bf16"), noinline)) inline float bf16_chains(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380);  // 2^-24
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  return sum_lanes(acc);
}

}  // namespace fma_peak_detail

// GFLOP/s of the loop above on all OpenMP threads for about `seconds`; 0 when
// this CPU lacks the instructions (AVX-512F, and AVX512-BF16 for bf16) or,
// for bf16, has AMX.
inline double fma_peak_gflops(DType dtype, double seconds = 0.2) {
  const bool bf16 = dtype == DType::kBF16;
  if (!__builtin_cpu_supports("avx512f") || (bf16 && !__builtin_cpu_supports("avx512bf16"))) return 0;
  if (bf16 && cpu::cpu_flag("amx_bf16")) return 0;
  // Instructions per thread: two per cycle at about 3 GHz for `seconds`.
  const int64_t iters = static_cast<int64_t>(seconds * 6e9);
  const double flop_per_iter = fma_peak_detail::kChains * cpu::fma_instruction_flop(dtype, 512);
  volatile float sink = 0;
  int threads = 1;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
  {
    const float r = bf16 ? fma_peak_detail::bf16_chains(iters / fma_peak_detail::kChains)
                         : fma_peak_detail::fp32_chains(iters / fma_peak_detail::kChains);
#pragma omp critical
    sink = sink + r;
#pragma omp single
    threads = omp_get_num_threads();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flop_per_iter * static_cast<double>(iters / fma_peak_detail::kChains) * threads / s / 1e9;
}

}  // namespace zero::bench
