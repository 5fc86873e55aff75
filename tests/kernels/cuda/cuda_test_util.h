// Shared set-up of the CUDA tests: a CPU backend and a CUDA backend side by
// side, tensors mirrored on both (same values, same dtype), and comparisons
// of a CUDA result with the CPU one.
//
// The CPU backend is the reference (kernels/cpu is what CI tests against the
// double-precision references); each test states its tolerance: "exact" where
// the CUDA kernel follows the CPU kernel's arithmetic step for step, a bound
// otherwise. Every test skips itself, with a message, when no CUDA device is
// visible, so the suite builds and passes on machines without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace zero::cuda_test {

inline constexpr const char* kNoDeviceMessage =
    "no CUDA device visible (cuda_device_available() is false); the CUDA tests need a GPU";

// A tensor with the same contents on the CPU backend (cpu) and on the device (gpu).
struct Mirrored {
  Tensor cpu;
  Tensor gpu;
};

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override;

  // values are rounded into `dtype` (round to nearest even), then mirrored.
  Mirrored mirrored(const std::vector<float>& values, const Shape& shape, DType dtype);
  Mirrored mirrored_ids(const std::vector<int32_t>& ids, const Shape& shape);
  // Uniform values in [lo, hi), rounded into `dtype` and mirrored.
  Mirrored random(const Shape& shape, DType dtype, uint32_t seed, float lo = -1.0f,
                  float hi = 1.0f);

  // The elements of a tensor (either tier) as floats.
  std::vector<float> values(const Tensor& t);

  CpuBackend cpu_;
  std::unique_ptr<CudaBackend> gpu_;
};

std::vector<float> uniform_values(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// |actual - expected| <= atol + rtol * |expected| element by element; reports
// the first few violations and the largest difference. NaNs must match NaNs.
void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                  float atol, float rtol, const std::string& what);
// Bit-for-bit equality of the float values (NaN matches NaN).
void expect_exact(const std::vector<float>& actual, const std::vector<float>& expected,
                  const std::string& what);

}  // namespace zero::cuda_test
