// Run-time choice of the SIMD kernel table by CPUID.
#include "kernels/cpu/simd_kernels.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace zero::cpu {

extern const SimdKernels kAvx512Kernels;
extern const SimdKernels kAvx2Kernels;

namespace {

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

const SimdKernels& choose() {
  const char* forced = std::getenv("ZE_SIMD");
  if (forced != nullptr && *forced != '\0') {
    if (const SimdKernels* k = simd_kernels_for(forced)) return *k;
    std::fprintf(stderr, "ZeroEngine: ZE_SIMD=%s is not available on this CPU (use avx512 or avx2)\n",
                 forced);
    std::exit(2);
  }
  if (cpu_has_avx512()) return kAvx512Kernels;
  if (cpu_has_avx2()) return kAvx2Kernels;
  std::fprintf(stderr, "ZeroEngine needs a CPU with AVX2, FMA and F16C (or AVX-512)\n");
  std::exit(2);
}

}  // namespace

const SimdKernels& simd_kernels() {
  static const SimdKernels& k = choose();
  return k;
}

const SimdKernels* simd_kernels_for(std::string_view isa) {
  if (isa == "avx512") return cpu_has_avx512() ? &kAvx512Kernels : nullptr;
  if (isa == "avx2") return cpu_has_avx2() ? &kAvx2Kernels : nullptr;
  return nullptr;
}

}  // namespace zero::cpu
