// Shared set-up of the CUDA tests; see cuda_test_util.h.
#include "tests/kernels/cuda/cuda_test_util.h"

#include <cmath>
#include <cstring>
#include <random>

namespace zero::cuda_test {

void CudaVsCpuTest::SetUp() {
  if (!cuda_device_available()) GTEST_SKIP() << kNoDeviceMessage;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::create(0);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  gpu_ = *std::move(backend);
}

Mirrored CudaVsCpuTest::mirrored(const std::vector<float>& values, const Shape& shape,
                                 DType dtype) {
  Mirrored m;
  m.cpu = cpu_.empty(shape, dtype, MemCategory::kActivations);
  EXPECT_EQ(static_cast<int64_t>(values.size()), m.cpu.numel());
  for (size_t i = 0; i < values.size(); ++i) store_from_float(m.cpu.data(), dtype, i, values[i]);
  m.gpu = gpu_->empty(shape, dtype, MemCategory::kActivations);
  gpu_->copy(m.gpu, m.cpu);
  return m;
}

Mirrored CudaVsCpuTest::mirrored_ids(const std::vector<int32_t>& ids, const Shape& shape) {
  Mirrored m;
  m.cpu = cpu_.empty(shape, DType::kI32, MemCategory::kActivations);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), m.cpu.numel());
  std::memcpy(m.cpu.data(), ids.data(), ids.size() * sizeof(int32_t));
  m.gpu = gpu_->empty(shape, DType::kI32, MemCategory::kActivations);
  gpu_->copy(m.gpu, m.cpu);
  return m;
}

Mirrored CudaVsCpuTest::random(const Shape& shape, DType dtype, uint32_t seed, float lo,
                               float hi) {
  return mirrored(uniform_values(shape_numel(shape), seed, lo, hi), shape, dtype);
}

std::vector<float> CudaVsCpuTest::values(const Tensor& t) {
  std::vector<unsigned char> bytes(t.nbytes());
  if (t.tier() == Tier::kDevice) {
    gpu_->copy(bytes.data(), t.data(), t.nbytes());
  } else {
    std::memcpy(bytes.data(), t.data(), t.nbytes());
  }
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_float(bytes.data(), t.dtype(), i);
  return out;
}

std::vector<float> uniform_values(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                  float atol, float rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  int64_t failures = 0;
  double max_diff = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const float a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(e) || std::isnan(a)) {
      ok = std::isnan(e) && std::isnan(a);
    } else if (std::isinf(e) || std::isinf(a)) {
      ok = a == e;
    } else {
      const double diff = std::fabs(static_cast<double>(a) - e);
      max_diff = diff > max_diff ? diff : max_diff;
      ok = diff <= atol + rtol * std::fabs(static_cast<double>(e));
    }
    if (!ok) {
      ++failures;
      if (reported++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: cuda " << a << " vs cpu " << e
                      << " (atol " << atol << ", rtol " << rtol << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << actual.size()
                         << " elements out of tolerance; largest difference " << max_diff;
}

void expect_exact(const std::vector<float>& actual, const std::vector<float>& expected,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int reported = 0;
  int64_t failures = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const float a = actual[i], e = expected[i];
    const bool ok = (std::isnan(a) && std::isnan(e)) || float_bits(a) == float_bits(e);
    if (!ok) {
      ++failures;
      if (reported++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: cuda " << a << " (0x" << std::hex << float_bits(a)
                      << ") vs cpu " << e << " (0x" << float_bits(e) << std::dec << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << actual.size()
                         << " elements differ (bit-exact expected)";
}

}  // namespace zero::cuda_test
