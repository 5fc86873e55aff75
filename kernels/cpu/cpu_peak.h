// This CPU's arithmetic peak from its instruction set and clock: the MFU
// denominator of a CPU run (runtime/tools/gemm_rate.h) and the per-instruction
// FLOPs the FMA ceiling benchmark counts (bench/fma_peak.h), kept here once.
//
//   peak = cores x FLOP/cycle/core x clock
//   FLOP/cycle/core = kFmaPipes x FLOP of one vector instruction of the widest
//   ISA the GEMM can use: 512-bit fp32 FMA 32 (AVX-512F), 256-bit 16 (AVX2 +
//   FMA), 128-bit multiply and add 8 (SSE); for GEMMs that run in bf16,
//   vdpbf16ps 64 (AVX512-BF16) or AMX's 1024 per core (a 16x16x32 tile
//   product every 16 cycles).
//   cores: the physical cores the rank's threads can use (hyperthreads share
//   their core's FMA units), at most its OpenMP threads.
//   clock: the nominal one, from cpufreq's base_frequency, else the "@ x GHz"
//   of the model name, else cpufreq's cpuinfo_max_freq, else /proc/cpuinfo's
//   "cpu MHz" (a VM's fixed figure; on bare metal a momentary reading).
// A ceiling computed, not measured, so it does not move with the load of the
// machine; two FMA pipes per core is assumed (the Xeon and EPYC cores we run
// on), and describe() says so, the figures and where the clock came from.
#pragma once

#include <set>
#include <string>

#include "core/dtype.h"

namespace zero::cpu {

// Vector FMA (or dot-product) units per core.
inline constexpr int kFmaPipes = 2;

// FLOP of one vector FMA instruction `vector_bits` wide: fp32 (vfmadd, 2 per
// lane) or bf16 (vdpbf16ps: each fp32 lane adds two bf16 products, 4 per
// 32 bits).
constexpr int fma_instruction_flop(DType dtype, int vector_bits) {
  return dtype == DType::kBF16 ? vector_bits / 32 * 4 : vector_bits / 32 * 2;
}

// What the peak is computed from; read_cpu_facts() fills it from this machine.
struct CpuFacts {
  std::set<std::string> flags;  // /proc/cpuinfo's "flags" of the first CPU ("avx512f", "amx_bf16", ...)
  std::string model_name;       // "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
  double base_mhz = 0;          // cpufreq base_frequency; 0: absent
  double max_mhz = 0;           // cpufreq cpuinfo_max_freq; 0: absent
  double cpuinfo_mhz = 0;       // /proc/cpuinfo "cpu MHz" of the first CPU; 0: absent
  int physical_cores = 0;       // distinct cores among the CPUs this process may run on
};
CpuFacts read_cpu_facts();

struct CpuPeak {
  double tflops = 0;          // 0: no clock known (no peak)
  int cores = 0;
  int flop_per_cycle = 0;     // per core
  double ghz = 0;
  std::string precision;      // "fp32 FMA", "bf16 dot-product", "bf16 AMX"
  std::string isa;            // "AVX-512", "AVX2", "SSE", "AVX512-BF16", "AMX-BF16"
  std::string clock_source;   // "cpufreq base_frequency", "the model name", ...
  // "fp32 FMA peak of 2 cores x 64 FLOP/cycle x 2.3 GHz (AVX-512, 2 FMA
  // pipes; clock: /proc/cpuinfo cpu MHz)", or why there is none.
  std::string describe() const;
};

// The peak of GEMMs computed in `gemm_dtype` (kBF16 where the bf16 GEMMs run
// in bf16; anything else counts fp32 FMAs) on `threads` threads.
CpuPeak cpu_peak(const CpuFacts& facts, DType gemm_dtype, int threads);

// Whether /proc/cpuinfo lists a flag (GCC 12's __builtin_cpu_supports knows no AMX).
bool cpu_flag(const std::string& flag);

}  // namespace zero::cpu
