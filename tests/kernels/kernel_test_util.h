// Shared helpers for the CPU op tests: a fixture owning a CpuBackend, tensors
// built from / read back into double vectors (the currency of
// tests/reference), seeded random data, and comparisons that report the worst
// element when they fail.
//
// Two error measures are used throughout:
//  * relative to the max-norm, max_i |a_i - e_i| <= tol * max_i |e_i|, for
//    results whose error scales with the magnitude of the whole output (GEMMs,
//    reductions, gradients), so values that cancel to ~0 are not held to an
//    impossible relative bound;
//  * per element, |a_i - e_i| <= rel * |e_i| + abs, for rounding to a storage
//    dtype, whose error is relative to each value.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/ops.h"
#include "tests/reference/reference_ops.h"

namespace zero {
// How GoogleTest prints a DType parameter (test names in ctest read "fp32").
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
}  // namespace zero

namespace zero::test {

using ref::Vec;

// Unit roundoff (half an ulp, relative) of each storage dtype.
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::kF32: return std::ldexp(1.0, -24);
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kI32: break;
  }
  return 0.0;
}

// v rounded to fp32 and then to dtype t, as a double (what storing v in a
// tensor of dtype t keeps).
inline double round_to(DType t, double v) {
  uint16_t h;
  const float f = static_cast<float>(v);
  switch (t) {
    case DType::kF32: return f;
    case DType::kBF16: return bf16_to_float(float_to_bf16(f));
    case DType::kF16: h = float_to_fp16(f); return fp16_to_float(h);
    case DType::kI32: break;
  }
  return v;
}

inline Vec rounded(const Vec& v, DType t) {
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_to(t, v[i]);
  return out;
}

// Uniform values in [lo, hi), reproducible for a seed.
inline Vec random_vec(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

inline double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline Vec scaled(const Vec& v, double s) {
  Vec out(v);
  for (double& x : out) x *= s;
  return out;
}

inline Vec plus(const Vec& a, const Vec& b) {
  Vec out(a);
  for (size_t i = 0; i < a.size(); ++i) out[i] += b[i];
  return out;
}

// Sum with Neumaier's compensation: ~2^-53 relative whatever the length (a
// plain double loop drifts by up to n * 2^-53, 3e-10 over 3e6 terms).
inline double compensated_sum(const Vec& terms) {
  double sum = 0.0, carry = 0.0;
  for (double t : terms) {
    const double s = sum + t;
    carry += std::fabs(sum) >= std::fabs(t) ? (sum - s) + t : (t - s) + sum;
    sum = s;
  }
  return sum + carry;
}

// Every element as a double (any dtype).
inline Vec to_vec(const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(t.data(), t.dtype(), i);
  return v;
}

// max_i |actual_i - expected_i| <= tol * max_i |expected_i|.
inline ::testing::AssertionResult near_max_norm(const Vec& actual, const Vec& expected,
                                                double tol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  const double bound = tol * std::max(max_abs(expected), 1e-300);
  size_t worst = 0;
  double worst_err = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    if (std::isnan(err))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << actual[i] << ", expected " << expected[i];
    if (err > worst_err) worst = i, worst_err = err;
  }
  if (worst_err <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst << ": got " << actual[worst] << ", expected " << expected[worst]
         << "; error " << worst_err << " > " << tol << " * max|expected| = " << bound;
}

// |actual_i - expected_i| <= rel * |expected_i| + abs for every i.
inline ::testing::AssertionResult near_each(const Vec& actual, const Vec& expected, double rel,
                                            double abs) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double bound = rel * std::fabs(expected[i]) + abs;
    const double err = std::fabs(actual[i] - expected[i]);
    if (!(err <= bound))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << actual[i] << ", expected " << expected[i]
             << "; error " << err << " > " << bound;
  }
  return ::testing::AssertionSuccess();
}

// Byte-for-byte equality of two buffers of n elements of elem_bytes each.
inline ::testing::AssertionResult same_bits(const void* a, const void* b, size_t n,
                                            size_t elem_bytes) {
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(pa + i * elem_bytes, pb + i * elem_bytes, elem_bytes) != 0) {
      uint32_t ua = 0, ub = 0;
      std::memcpy(&ua, pa + i * elem_bytes, std::min<size_t>(elem_bytes, 4));
      std::memcpy(&ub, pb + i * elem_bytes, std::min<size_t>(elem_bytes, 4));
      return ::testing::AssertionFailure() << "element " << i << " differs: 0x" << std::hex << ua
                                           << " vs 0x" << ub;
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel())
    return ::testing::AssertionFailure() << a.debug_string() << " vs " << b.debug_string();
  return same_bits(a.data(), b.data(), static_cast<size_t>(a.numel()), dtype_size(a.dtype()));
}

// A CpuBackend and tensor constructors. Tensors are host memory (the CPU
// backend's compute tier) tracked as activations.
class KernelTest : public ::testing::Test {
 protected:
  Ops& ops() { return backend_.ops(); }

  Tensor empty(const Shape& shape, DType dtype) {
    return backend_.empty(shape, dtype, MemCategory::kActivations);
  }
  // A tensor holding v stored in dtype (rounded to nearest even).
  Tensor from_vec(const Vec& v, const Shape& shape, DType dtype = DType::kF32) {
    Tensor t = empty(shape, dtype);
    EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
    for (size_t i = 0; i < v.size(); ++i)
      store_from_float(t.data(), dtype, i, static_cast<float>(v[i]));
    return t;
  }
  Tensor from_ids(const std::vector<int32_t>& ids) {
    Tensor t = empty({static_cast<int64_t>(ids.size())}, DType::kI32);
    std::memcpy(t.data(), ids.data(), ids.size() * sizeof(int32_t));
    return t;
  }
  // A fresh copy of t (same dtype and shape).
  Tensor clone(const Tensor& t) {
    Tensor c = empty(t.shape(), t.dtype());
    std::memcpy(c.data(), t.data(), t.nbytes());
    return c;
  }

  CpuBackend backend_;
};

// Readable names for value-parameterised tests over dtypes.
inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace zero::test
