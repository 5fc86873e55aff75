// The elementwise and reduction ops on the CPU (our SIMD kernels): add,
// accumulate, bias_backward, scale, fill, cast, sum_squares, count_nonfinite,
// for every float dtype they accept. Sizes are odd (37) so vector tails run,
// and some are above the kernels' threading threshold (2^15 elements) so the
// per-thread range split runs too.
//
// Tolerances:
//  * add, accumulate, scale, fill and cast do one fp32 operation and one
//    rounding per element, so they are compared bit for bit with the same
//    operation written as a scalar loop over core/dtype.h's helpers.
//  * bias_backward vs reference::numeric_vjp (central differences in double):
//    1e-4 relative to the max-norm; a 16-bit dbias adds one rounding (u =
//    2^-8 for bf16) per call. The long-column case is checked against a double
//    sum at 1e-5 relative to the max-norm: an fp32 running sum of 3001 terms
//    in [-1, 1] drifts by ~sqrt(3001) * 2^-24 * |partial sum|, ~1e-6 of the
//    max-norm.
//  * sum_squares accumulates in double (the ops.h contract), and the squares
//    of fp32 values are exact in double, so over 3e6 elements it must match a
//    compensated double loop (error ~2^-53) to 1e-12 relative. An fp32 partial
//    sum anywhere costs ~1e-8; a single naive double accumulator, up to
//    n * 2^-53 = 3e-10, which is why the reference is compensated too.
//  * count_nonfinite is a count: exact.
#include <cstdlib>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

constexpr int64_t kSmall = 37;       // two 16-lane vectors and a 5-lane tail
constexpr int64_t kLarge = 100003;   // threaded, odd
constexpr DType kFloatDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

// Values that exercise rounding: random significands over several binades.
Vec mixed_values(size_t n, uint64_t seed) {
  Vec v = random_vec(n, -1.0, 1.0, seed);
  for (size_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.0, static_cast<int>(i % 13) - 6);
  return v;
}

class ElementwiseTest : public KernelTest, public ::testing::WithParamInterface<DType> {};
using ElementwiseFp32Test = KernelTest;

// The avx2/ copies of these tests (tests/kernels/CMakeLists.txt) set
// ZE_SIMD=avx2; make sure the ops really run on the table it names.
TEST_F(ElementwiseFp32Test, OpsUseTheKernelTableZeSimdNames) {
  const char* forced = std::getenv("ZE_SIMD");
  if (forced == nullptr || *forced == '\0') GTEST_SKIP() << "ZE_SIMD is not set";
  EXPECT_STREQ(backend_.cpu_ops().simd().isa, forced);
}

TEST_F(ElementwiseFp32Test, AddIsExactAndMayAlias) {
  for (int64_t n : {kSmall, kLarge}) {
    SCOPED_TRACE(n);
    Tensor a = from_vec(mixed_values(n, 401), {n}), b = from_vec(mixed_values(n, 402), {n});
    Tensor out = empty({n}, DType::kF32);
    ops().add(a, b, out);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.f32()[i], a.f32()[i] + b.f32()[i]) << i;
    ops().add(a, b, a);  // out aliasing a
    EXPECT_TRUE(same_bits(a, out));
  }
}

TEST_P(ElementwiseTest, AccumulateAddsInFp32AndRoundsOnce) {
  const DType dtype = GetParam();
  for (int64_t n : {kSmall, kLarge}) {
    SCOPED_TRACE(n);
    Tensor dst = from_vec(mixed_values(n, 403), {n}, dtype);
    Tensor src = from_vec(mixed_values(n, 404), {n});
    Tensor before = clone(dst);
    ops().accumulate(dst, src);
    Tensor want = empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
      const float sum = load_as_float(before.data(), dtype, i) + src.f32()[i];
      store_from_float(want.data(), dtype, i, sum);
    }
    EXPECT_TRUE(same_bits(dst, want));
  }
}

// The gradient-accumulation contract: twice into zeros is twice.
TEST_P(ElementwiseTest, AccumulateTwiceIsTwice) {
  const DType dtype = GetParam();
  const Vec g = rounded(mixed_values(kSmall, 405), dtype);  // so 2g is representable
  Tensor dst = empty({kSmall}, dtype), src = from_vec(g, {kSmall});
  ops().fill(dst, 0.0f);
  ops().accumulate(dst, src);
  ops().accumulate(dst, src);
  EXPECT_EQ(to_vec(dst), scaled(g, 2.0));
}

TEST_P(ElementwiseTest, BiasBackwardMatchesFiniteDifferencesAndAccumulates) {
  const DType dtype = GetParam();
  constexpr int64_t kRows = 5;
  const Vec dy = rounded(random_vec(kRows * kSmall, -1.0, 1.0, 406), DType::kF32);
  const Vec x = random_vec(kRows * kSmall, -1.0, 1.0, 407);
  // y = x + bias broadcast over rows.
  auto forward = [&](const Vec& bias) {
    Vec y(x);
    for (size_t i = 0; i < y.size(); ++i) y[i] += bias[i % kSmall];
    return y;
  };
  const Vec grad = ref::numeric_vjp(forward, random_vec(kSmall, -1.0, 1.0, 408), dy);
  const double u = unit_roundoff(dtype), abs = 1e-4 * max_abs(grad);
  Tensor dy_t = from_vec(dy, {kRows, kSmall});

  Tensor db = empty({kSmall}, dtype);
  ops().fill(db, 0.0f);
  ops().bias_backward(dy_t, db);
  EXPECT_TRUE(near_each(to_vec(db), grad, u, abs)) << "one call";
  ops().bias_backward(dy_t, db);
  EXPECT_TRUE(near_each(to_vec(db), scaled(grad, 2.0), 2 * u, 2 * abs)) << "two calls";

  const Vec prefill = rounded(random_vec(kSmall, -3.0, 3.0, 409), dtype);
  Tensor db2 = from_vec(prefill, {kSmall}, dtype);
  ops().bias_backward(dy_t, db2);
  EXPECT_TRUE(near_each(to_vec(db2), plus(prefill, grad), u, abs)) << "pre-filled";
}

TEST_F(ElementwiseFp32Test, BiasBackwardLongColumnsThreaded) {
  constexpr int64_t kRows = 3001;  // 3001 * 37 elements: columns are split across threads
  const Vec dy = rounded(random_vec(kRows * kSmall, -1.0, 1.0, 410), DType::kF32);
  Vec want(kSmall, 0.0);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kSmall; ++c) want[c] += dy[r * kSmall + c];
  Tensor db = empty({kSmall}, DType::kF32);
  ops().fill(db, 0.0f);
  ops().bias_backward(from_vec(dy, {kRows, kSmall}), db);
  EXPECT_TRUE(near_max_norm(to_vec(db), want, 1e-5));
}

TEST_P(ElementwiseTest, ScaleIsExact) {
  const DType dtype = GetParam();
  for (int64_t n : {kSmall, kLarge}) {
    SCOPED_TRACE(n);
    Tensor x = from_vec(mixed_values(n, 411), {n}, dtype);
    Tensor before = clone(x);
    ops().scale(x, -0.3f);
    Tensor want = empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i)
      store_from_float(want.data(), dtype, i, load_as_float(before.data(), dtype, i) * -0.3f);
    EXPECT_TRUE(same_bits(x, want));
  }
}

TEST_P(ElementwiseTest, FillWritesTheRoundedValue) {
  const DType dtype = GetParam();
  for (int64_t n : {kSmall, kLarge}) {
    Tensor x = from_vec(mixed_values(n, 412), {n}, dtype);
    ops().fill(x, 0.1f);
    Tensor want = empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) store_from_float(want.data(), dtype, i, 0.1f);
    EXPECT_TRUE(same_bits(x, want)) << "n=" << n;
  }
}

// Every (src, dst) pair; the special values are in simd_isa_test.cc.
TEST_P(ElementwiseTest, CastMatchesScalarConversion) {
  const DType src_dtype = GetParam();
  for (DType dst_dtype : kFloatDtypes) {
    for (int64_t n : {kSmall, kLarge}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(src_dtype) << " -> " << dtype_name(dst_dtype)
                                        << ", n=" << n);
      // Values above fp16's range check overflow to inf on the way to fp16.
      Vec v = mixed_values(n, 413);
      v[n / 2] = 1e5, v[n - 1] = -7e4;
      Tensor src = from_vec(v, {n}, src_dtype), dst = empty({n}, dst_dtype);
      ops().cast(src, dst);
      Tensor want = empty({n}, dst_dtype);
      for (int64_t i = 0; i < n; ++i)
        store_from_float(want.data(), dst_dtype, i, load_as_float(src.data(), src_dtype, i));
      EXPECT_TRUE(same_bits(dst, want));
    }
  }
}

// 3e6 elements: 1e-3 (whose fp32 squares lose bits in an fp32 sum) and
// values of mixed sign and magnitude.
TEST_P(ElementwiseTest, SumSquaresIsAccurateOverLongVectors) {
  const DType dtype = GetParam();
  constexpr int64_t kN = 3'000'000;
  Tensor x = empty({kN}, dtype);
  const Vec mixed = random_vec(kN / 2, -3.0, 3.0, 414);
  for (int64_t i = 0; i < kN; ++i)
    store_from_float(x.data(), dtype, i, i % 2 == 0 ? 1e-3f : static_cast<float>(mixed[i / 2]));
  Vec squares(kN);
  for (int64_t i = 0; i < kN; ++i) {
    const double v = load_as_float(x.data(), dtype, i);
    squares[i] = v * v;  // exact in double
  }
  const double want = compensated_sum(squares);
  EXPECT_NEAR(ops().sum_squares(x), want, 1e-12 * want);

  // All-equal small values: any fp32 partial sum rounds the same way every time.
  ops().fill(x, 1e-3f);
  const double v = load_as_float(x.data(), dtype, 0);
  EXPECT_NEAR(ops().sum_squares(x), kN * v * v, 1e-12 * kN * v * v);

  // Short and tail-only lengths.
  for (int64_t n : {int64_t{1}, int64_t{7}, kSmall}) {
    Tensor s = x.slice(0, {n});
    EXPECT_NEAR(ops().sum_squares(s), n * v * v, 1e-12 * n * v * v) << "n=" << n;
  }
}

TEST_P(ElementwiseTest, CountNonfiniteCountsInfAndNanEverywhere) {
  const DType dtype = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // The largest finite value of each dtype is not counted.
  const float big = dtype == DType::kF16    ? 65504.0f
                    : dtype == DType::kBF16 ? bf16_to_float(0x7f7f)
                                            : std::numeric_limits<float>::max();
  for (int64_t n : {kSmall, kLarge}) {
    SCOPED_TRACE(n);
    Tensor x = from_vec(mixed_values(n, 415), {n}, dtype);
    EXPECT_EQ(ops().count_nonfinite(x), 0);
    // First and last lane of a vector body, the tail, and around the middle
    // (where threads split the large case).
    const int64_t positions[] = {0, 15, 16, 31, n / 2 - 1, n / 2, n - 5, n - 1};
    const float values[] = {inf, -inf, nan, -nan, inf, nan, -inf, nan};
    for (int i = 0; i < 8; ++i) store_from_float(x.data(), dtype, positions[i], values[i]);
    store_from_float(x.data(), dtype, 1, big);
    store_from_float(x.data(), dtype, n - 2, -big);
    EXPECT_EQ(ops().count_nonfinite(x), 8);
    EXPECT_EQ(ops().count_nonfinite(x.slice(n - 5, {5})), 2) << "tail only";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ElementwiseTest, ::testing::ValuesIn(kFloatDtypes),
                         dtype_param_name);

}  // namespace
}  // namespace zero::test
