// The rate this rank's backend runs the model's MLP GEMM at (micro-batch
// tokens x d_model x MLP width on this rank: the shape that dominates a
// block), measured at start: the denominator of the progress line's MFU when
// no peak is given (run.peak_tflops 0). A ratio to what the machine's GEMM
// library achieves on that shape rather than to a datasheet peak the library
// never reaches: it says how much of the step is not GEMM time.
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

}  // namespace zero
