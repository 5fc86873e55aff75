// MFU's denominator when no peak is given (run.peak_tflops 0), and the rate
// this rank's backend runs the model's MLP GEMM at (micro-batch tokens x
// d_model x MLP width on this rank: the shape that dominates a block).
//
// On the CPU backend the denominator is the CPU's peak for the precision its
// GEMMs run in, from the ISA, the cores and the clock (kernels/cpu/cpu_peak.h):
// a figure that does not move with the machine's load, where a rate measured
// at start ranged 0.015-0.45 TFLOP/s on a busy host. On another backend (a
// GPU) it is the GEMM rate measured at start, a ratio to what the device's
// GEMM library reaches on that shape.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/backend.h"

namespace zero {

struct GemmRate {
  double tflops = 0;      // one rank's rate
  int64_t m = 0, k = 0, n = 0;
  DType dtype = DType::kF32;
  int reps = 0;           // timed GEMMs (after one warm-up); the rate is the fastest's
  std::string describe() const;  // "0.243 TFLOP/s (4096 x 768 x 3072 fp32)"
};

// Times C[m, n] = A[m, k] B[k, n] with A and B (random values) in `dtype` (the GEMM compute
// dtype, as the model's matmuls run it) on the backend's compute stream:
// one warm-up, then repeats until 0.2 s have passed (2 to 10 of them); the
// rate is the fastest repeat's.
// Each dimension is capped at 4096 (the buffers: at most 3 x 64 MiB fp32,
// tracked as workspace and freed before it returns). Not on a dry run.
GemmRate measure_gemm_rate(Backend& backend, DType dtype, int64_t m, int64_t k, int64_t n);

struct MfuPeak {
  double tflops = 0;  // one rank's; 0: none (the progress line shows no MFU)
  std::string what;   // for the start-up line: what the figure is and where it came from
};
// The denominator above for a model of `dtype` parameters whose MLP GEMM is
// m x k x n on this rank (measured there only off the CPU). Not on a dry run.
MfuPeak default_mfu_peak(Backend& backend, DType dtype, int64_t m, int64_t k, int64_t n);

}  // namespace zero
