// CUDA elementwise ops and reductions against the CPU backend: add,
// accumulate, scale, fill, cast (every dtype pair, with rounding ties,
// overflow, subnormals, inf and NaN), dropout and its backward (the same
// counter-based mask, bit for bit), bias_backward, sum_squares,
// count_nonfinite.
//
// Tolerances: exact for the elementwise ops and casts (one fp32 operation,
// then one round-to-nearest-even; bf16 bit patterns, NaNs included, must equal
// zero::float_to_bf16). bias_backward: exact up to 256 rows (the same
// summation order as the CPU), else 1e-5 * rows absolute plus one ulp of a
// 16-bit destination. sum_squares: 1e-5 relative to the CPU (which sums fp32
// blocks) and 1e-10 relative to a double reference (the GPU squares and sums
// in double). count_nonfinite: exact.
#include <cmath>
#include <limits>

#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

constexpr DType kFloatDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

class ElementwiseTest : public CudaVsCpuTest {};

std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f,
                          1.0f + 1.0f / 256.0f,         // bf16 tie, rounds to even (down)
                          1.0f + 3.0f / 256.0f,         // bf16 tie, rounds to even (up)
                          1.0f + 1.0f / 2048.0f,        // fp16 tie
                          65504.0f, 65520.0f, 70000.0f, // fp16 max, overflow to inf
                          3.0e38f, -3.3e38f, 1e-8f, 6e-8f, 1e-40f, -1e-45f,  // subnormals
                          inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> r = uniform_values(1000, 91, -100.0f, 100.0f);
  v.insert(v.end(), r.begin(), r.end());
  return v;
}

TEST_F(ElementwiseTest, AddScaleFillAccumulateMatchCpuExactly) {
  const int64_t n = 4099;
  Mirrored a = random(Shape{n}, DType::kF32, 1);
  Mirrored b = random(Shape{n}, DType::kF32, 2);
  Mirrored out = random(Shape{n}, DType::kF32, 3);
  cpu_.ops().add(a.cpu, b.cpu, out.cpu);
  gpu_->ops().add(a.gpu, b.gpu, out.gpu);
  expect_exact(values(out.gpu), values(out.cpu), "add");
  cpu_.ops().add(a.cpu, b.cpu, a.cpu);  // out aliases a
  gpu_->ops().add(a.gpu, b.gpu, a.gpu);
  expect_exact(values(a.gpu), values(a.cpu), "add in place");

  for (DType t : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Mirrored x = random(Shape{n}, t, 4, -3.0f, 3.0f);
    cpu_.ops().scale(x.cpu, 0.37f);
    gpu_->ops().scale(x.gpu, 0.37f);
    expect_exact(values(x.gpu), values(x.cpu), "scale");
    cpu_.ops().accumulate(x.cpu, b.cpu);
    gpu_->ops().accumulate(x.gpu, b.gpu);
    expect_exact(values(x.gpu), values(x.cpu), "accumulate");
    for (float v : {0.0f, -0.0f, 1.1f}) {
      cpu_.ops().fill(x.cpu, v);
      gpu_->ops().fill(x.gpu, v);
      expect_exact(values(x.gpu), values(x.cpu), cat("fill ", v));
    }
  }
}

TEST_F(ElementwiseTest, DropoutMatchesCpuExactly) {
  const Shape shape{3, 67, 129};  // odd sizes; rows and positions split across blocks
  for (DType t : kFloatDtypes) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      SCOPED_TRACE(cat(dtype_name(t), " p ", p));
      const DropoutKey key{42, 7, 12345};
      Mirrored x = random(shape, t, 6, -3.0f, 3.0f);
      Mirrored y = random(shape, t, 7);
      cpu_.ops().dropout(x.cpu, y.cpu, p, key);
      gpu_->ops().dropout(x.gpu, y.gpu, p, key);
      expect_exact(values(y.gpu), values(y.cpu), "dropout");
      cpu_.ops().dropout_backward(x.cpu, y.cpu, p, DropoutKey{42, 8, 12345});
      gpu_->ops().dropout_backward(x.gpu, y.gpu, p, DropoutKey{42, 8, 12345});
      expect_exact(values(y.gpu), values(y.cpu), "dropout_backward");
      cpu_.ops().dropout(x.cpu, x.cpu, p, key);  // in place
      gpu_->ops().dropout(x.gpu, x.gpu, p, key);
      expect_exact(values(x.gpu), values(x.cpu), "dropout in place");
    }
  }
}

TEST_F(ElementwiseTest, CastMatchesCpuExactlyForEveryPair) {
  const std::vector<float> v = special_values();
  const Shape shape{static_cast<int64_t>(v.size())};
  for (DType from : kFloatDtypes) {
    for (DType to : kFloatDtypes) {
      SCOPED_TRACE(cat(dtype_name(from), " -> ", dtype_name(to)));
      Mirrored src = mirrored(v, shape, from);
      Mirrored dst = random(shape, to, 5);
      cpu_.ops().cast(src.cpu, dst.cpu);
      gpu_->ops().cast(src.gpu, dst.gpu);
      expect_exact(values(dst.gpu), values(dst.cpu), "cast");
    }
  }
  // fp32 -> bf16 bit patterns, NaNs included, are float_to_bf16's.
  Mirrored src = mirrored(v, shape, DType::kF32);
  Tensor dst = gpu_->empty(shape, DType::kBF16, MemCategory::kActivations);
  gpu_->ops().cast(src.gpu, dst);
  std::vector<uint16_t> bits(v.size());
  gpu_->copy(bits.data(), dst.data(), dst.nbytes());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(bits[i], float_to_bf16(v[i])) << "element " << i << " = " << v[i];
  }
}

TEST_F(ElementwiseTest, BiasBackwardMatchesCpu) {
  for (int64_t rows : {int64_t{100}, int64_t{256}, int64_t{1000}}) {
    for (DType t : kFloatDtypes) {
      SCOPED_TRACE(cat(rows, " rows into ", dtype_name(t)));
      const int64_t cols = 200;
      Mirrored dy = random(Shape{rows, cols}, DType::kF32, 6);
      Mirrored dbias = random(Shape{cols}, t, 7);
      cpu_.ops().bias_backward(dy.cpu, dbias.cpu);
      gpu_->ops().bias_backward(dy.gpu, dbias.gpu);
      if (rows <= 256) {
        expect_exact(values(dbias.gpu), values(dbias.cpu), "dbias");
      } else {
        const float ulp = t == DType::kBF16 ? 1.0f / 128.0f : (t == DType::kF16 ? 1.0f / 1024.0f : 0.0f);
        expect_close(values(dbias.gpu), values(dbias.cpu), 1e-5f * static_cast<float>(rows),
                     ulp, "dbias");
      }
    }
  }
}

TEST_F(ElementwiseTest, SumSquaresIsDoubleAccurateAndDeterministic) {
  const int64_t n = 1'000'003;
  for (DType t : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Mirrored x = random(Shape{n}, t, 8, -2.0f, 2.0f);
    const std::vector<float> xs = values(x.cpu);
    double reference = 0.0;
    for (float f : xs) reference += static_cast<double>(f) * f;
    const double gpu = gpu_->ops().sum_squares(x.gpu);
    const double cpu = cpu_.ops().sum_squares(x.cpu);
    EXPECT_NEAR(gpu, reference, 1e-10 * reference);
    EXPECT_NEAR(gpu, cpu, 1e-5 * reference);
    EXPECT_EQ(gpu_->ops().sum_squares(x.gpu), gpu) << "second run differs";
  }
  Mirrored empty = random(Shape{0}, DType::kF32, 9);
  EXPECT_EQ(gpu_->ops().sum_squares(empty.gpu), 0.0);
}

TEST_F(ElementwiseTest, CountNonfiniteMatchesCpu) {
  const int64_t n = 300'001;
  std::vector<float> v = uniform_values(n, 10, -1e4f, 1e4f);
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t positions[] = {0, 17, 4096, 99'999, 200'000, n - 1};
  const float bad[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), inf, 1e30f, -inf};
  for (size_t i = 0; i < 6; ++i) v[static_cast<size_t>(positions[i])] = bad[i];
  for (DType t : kFloatDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Mirrored x = mirrored(v, Shape{n}, t);
    // 1e30 is finite in fp32 and bf16 (same exponent range); fp16 rounds it to inf.
    const int64_t expected = t == DType::kF16 ? 6 : 5;
    EXPECT_EQ(gpu_->ops().count_nonfinite(x.gpu), expected);
    EXPECT_EQ(gpu_->ops().count_nonfinite(x.gpu), cpu_.ops().count_nonfinite(x.cpu));
  }
}

}  // namespace
}  // namespace zero::cuda_test
