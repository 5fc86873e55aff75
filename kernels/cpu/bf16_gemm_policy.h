// Which precision a GEMM asked for in bf16 runs in on this CPU. bf16 storage
// must not cost speed: on CPUs without fast bf16 matrix instructions (no
// AVX512-BF16 or AMX, or a slow implementation of them) oneDNN's bf16 GEMM is
// slower than its fp32 one, and there the bf16 operands are widened to fp32
// (exactly) and multiplied in fp32 — the result differs from the bf16 GEMM's
// by at most its bf16 rounding of the fp32 activations, and is closer to the
// exact product.
//
// The rule: at the first bf16 GEMM of the process, a 512 x 512 x 512 GEMM
// is timed in each precision (interleaved, best of 6 after a warm-up, about
// 20 ms in all, buffers tracked as workspace); bf16 is kept unless fp32 is
// more than 25% faster (a margin noise does not cross, so separate processes
// — zero-estimate and the run — choose alike). ZE_CPU_BF16_GEMM=bf16 or =fp32 in the environment forces the choice
// (no measurement). The choice is the process's, shared by the real ops and
// the dry run, so the planner carves the workspace the run will carve.
#pragma once

#include <string>

#include "core/dtype.h"

namespace zero::cpu {

struct Bf16GemmChoice {
  DType gemm = DType::kBF16;  // kBF16: oneDNN's bf16 GEMM; kF32: widened to fp32
  double bf16_gflops = 0.0, fp32_gflops = 0.0;  // measured; 0 when forced
  std::string reason;                            // one line for the run's start-up output
};

// Measured (or read from the environment) once per process; thread-safe.
const Bf16GemmChoice& bf16_gemm_choice();

}  // namespace zero::cpu
