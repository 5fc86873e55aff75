// MFU's denominator: the CPU's ISA peak, or the backend's GEMM rate on the
// model's largest shape; see gemm_rate.h.
#include "runtime/tools/gemm_rate.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/bf16_gemm_policy.h"
#include "kernels/cpu/cpu_peak.h"

namespace zero {

std::string GemmRate::describe() const {
  return absl::StrFormat("%.3g TFLOP/s (%d x %d x %d %s)", tflops, m, k, n, dtype_name(dtype));
}

GemmRate measure_gemm_rate(Backend& backend, DType dtype, int64_t m, int64_t k, int64_t n) {
  ZE_CHECK(!backend.dry_run()) << "measure_gemm_rate on a dry run";
  constexpr int64_t kCap = 4096;
  GemmRate r;
  r.m = std::clamp<int64_t>(m, 1, kCap), r.k = std::clamp<int64_t>(k, 1, kCap), r.n = std::clamp<int64_t>(n, 1, kCap);
  r.dtype = dtype;
  // Operands of random values, not zeros (a GPU clocks higher on zeros).
  auto random_operand = [&](int64_t rows, int64_t cols) {
    std::vector<float> host(static_cast<size_t>(rows * cols));
    std::mt19937 gen(static_cast<uint32_t>(rows * 31 + cols));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : host) x = u(gen);
    Tensor f32 = backend.empty({rows, cols}, DType::kF32, MemCategory::kWorkspace);
    backend.copy(f32.data(), host.data(), host.size() * sizeof(float));
    if (dtype == DType::kF32) return f32;
    Tensor t = backend.empty({rows, cols}, dtype, MemCategory::kWorkspace);
    backend.ops().cast(f32, t);
    return t;
  };
  Tensor a = random_operand(r.m, r.k);
  Tensor b = random_operand(r.k, r.n);
  Tensor c = backend.empty({r.m, r.n}, DType::kF32, MemCategory::kWorkspace);
  MatmulSpec spec;
  spec.compute = dtype;
  backend.ops().matmul(a, b, c, spec);  // warm-up: primitive creation, first touch
  backend.synchronize_stream(kComputeStream);
  // The fastest repeat: the rate the library reaches on this shape, not
  // the mean of repeats another process's burst of work slowed.
  double total = 0, best = 0;
  while (r.reps < 10 && (r.reps < 2 || total < 0.2)) {
    const auto t0 = std::chrono::steady_clock::now();
    backend.ops().matmul(a, b, c, spec);
    backend.synchronize_stream(kComputeStream);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = r.reps == 0 ? s : std::min(best, s);
    total += s;
    ++r.reps;
  }
  r.tflops = 2.0 * static_cast<double>(r.m) * static_cast<double>(r.k) * static_cast<double>(r.n) / best / 1e12;
  return r;
}

MfuPeak default_mfu_peak(Backend& backend, DType dtype, int64_t m, int64_t k, int64_t n) {
  MfuPeak p;
  if (backend.compute_tier() == Tier::kHost) {
    // bf16 GEMMs run in bf16 or widened to fp32, as this CPU's policy chose.
    const DType gemm = dtype == DType::kBF16 ? cpu::bf16_gemm_choice().gemm : DType::kF32;
    const cpu::CpuPeak peak = cpu::cpu_peak(cpu::read_cpu_facts(), gemm, omp_get_max_threads());
    p.tflops = peak.tflops;
    p.what = peak.tflops > 0
                 ? absl::StrFormat("%.3g TFLOP/s per rank, %s (--peak-tflops X overrides)", peak.tflops,
                                   peak.describe())
                 : cat("nothing (no MFU shown): ", peak.describe(), "; --peak-tflops X gives a peak");
    return p;
  }
  const GemmRate rate = measure_gemm_rate(backend, dtype, m, k, n);
  p.tflops = rate.tflops;
  p.what = cat("the GEMM rate this rank measured at start, ", rate.describe(),
               " (--peak-tflops X gives the device's peak instead)");
  return p;
}

}  // namespace zero
