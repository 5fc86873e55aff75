// The backend's GEMM rate on the model's largest shape; see gemm_rate.h.
#include "runtime/tools/gemm_rate.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/check.h"

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

}  // namespace zero
