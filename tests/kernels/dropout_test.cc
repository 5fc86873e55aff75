// The dropout op on the CPU (kernels/dropout_mask.h's counter-based mask):
//  * y and dx are exactly keep ? v * dropout_scale(p) : 0 (one fp32 multiply,
//    one rounding into the dtype), compared bit for bit with a scalar loop over
//    dropout_keeps(), for every float dtype, in place too;
//  * the mask is a function of the key alone: the same key gives the same
//    mask, another layer or another first sample a different one, and row b
//    under first_sample g is row b - 1 under g + 1 (so a rank's rows see the
//    masks of their global samples);
//  * the kept fraction over 2^20 elements is 1 - p within 5 standard
//    deviations (sqrt(p (1 - p) / n), 3e-4 at p = 0.1);
//  * backward is the vector-Jacobian product of forward: against central
//    differences of the double reference, 1e-6 relative to the max-norm.
#include "kernels/dropout_mask.h"
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

constexpr DType kFloatDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

class DropoutTest : public KernelTest, public ::testing::WithParamInterface<DType> {
 public:
  // keep ? src * scale : 0, element by element through dtype.h's helpers.
  Tensor expected(const Tensor& src, float p, const DropoutKey& key) {
    Tensor want = empty(src.shape(), src.dtype());
    const int64_t b = src.dim(0), t = src.dim(1), c = src.dim(2);
    const float scale = dropout_scale(p);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t ti = 0; ti < t; ++ti)
        for (int64_t ci = 0; ci < c; ++ci) {
          const size_t i = static_cast<size_t>((bi * t + ti) * c + ci);
          const float v = load_as_float(src.data(), src.dtype(), i);
          store_from_float(want.data(), src.dtype(), i, dropout_keeps(key, p, bi, ti, ci) ? v * scale : 0.0f);
        }
    return want;
  }
  // Which elements of a [b, t, c] dropout of all-ones survive.
  std::vector<bool> mask(int64_t b, int64_t t, int64_t c, float p, const DropoutKey& key) {
    Tensor ones = from_vec(Vec(static_cast<size_t>(b * t * c), 1.0), {b, t, c});
    Tensor y = empty({b, t, c}, DType::kF32);
    ops().dropout(ones, y, p, key);
    std::vector<bool> keep(static_cast<size_t>(y.numel()));
    for (size_t i = 0; i < keep.size(); ++i) keep[i] = y.f32()[i] != 0.0f;
    return keep;
  }
};
using DropoutFp32Test = DropoutTest;

TEST_P(DropoutTest, ForwardAndBackwardAreExactlyMaskTimesScale) {
  const DType dtype = GetParam();
  const DropoutKey key{7, 3, 1000};
  for (float p : {0.1f, 0.5f}) {
    for (const Shape& shape : {Shape{2, 3, 37}, Shape{4, 64, 129}}) {  // unthreaded, threaded
      SCOPED_TRACE(testing::Message() << "p " << p << " " << shape_string(shape));
      const int64_t n = shape_numel(shape);
      Tensor x = from_vec(random_vec(n, -2.0, 2.0, 11), shape, dtype);
      Tensor y = empty(shape, dtype);
      ops().dropout(x, y, p, key);
      EXPECT_TRUE(same_bits(y, expected(x, p, key)));
      Tensor dy = from_vec(random_vec(n, -2.0, 2.0, 12), shape, dtype);
      Tensor dx = empty(shape, dtype);
      ops().dropout_backward(dy, dx, p, key);
      EXPECT_TRUE(same_bits(dx, expected(dy, p, key)));
      Tensor in_place = clone(x);
      ops().dropout(in_place, in_place, p, key);
      EXPECT_TRUE(same_bits(in_place, y));
    }
  }
}

TEST_F(DropoutFp32Test, ZeroProbabilityIsTheIdentity) {
  Tensor x = from_vec(random_vec(2 * 5 * 33, -1.0, 1.0, 13), {2, 5, 33});
  Tensor y = empty(x.shape(), DType::kF32);
  ops().dropout(x, y, 0.0f, DropoutKey{1, 0, 0});
  EXPECT_TRUE(same_bits(x, y));
}

TEST_F(DropoutFp32Test, MaskIsAFunctionOfTheKeyAlone) {
  const int64_t b = 4, t = 16, c = 48;
  const float p = 0.3f;
  const DropoutKey key{42, 5, 96};
  const std::vector<bool> m = mask(b, t, c, p, key);
  EXPECT_EQ(mask(b, t, c, p, key), m) << "same key, another call";
  EXPECT_NE(mask(b, t, c, p, DropoutKey{42, 6, 96}), m) << "another layer";
  EXPECT_NE(mask(b, t, c, p, DropoutKey{43, 5, 96}), m) << "another seed";
  EXPECT_NE(mask(b, t, c, p, DropoutKey{42, 5, 97}), m) << "another first sample";
  // Rows are keyed by their global sample: rows 1.. under first sample 96 are
  // rows 0.. under 97.
  const std::vector<bool> shifted = mask(b - 1, t, c, p, DropoutKey{42, 5, 97});
  EXPECT_EQ(std::vector<bool>(m.begin() + t * c, m.end()), shifted);
  // Positions and features are not interchangeable (t and c both feed the hash).
  const std::vector<bool> wide = mask(1, 1, t * c, p, DropoutKey{42, 5, 96});
  EXPECT_NE(std::vector<bool>(m.begin(), m.begin() + t * c), wide);
  // A slice of the features [16, 40) keyed by its first feature draws the
  // whole row's mask there (a row-parallel layer's input slice).
  const std::vector<bool> slice = mask(b, t, 24, p, DropoutKey{42, 5, 96, 0, 16});
  for (int64_t r = 0; r < b * t; ++r) {
    for (int64_t k = 0; k < 24; ++k) ASSERT_EQ(slice[r * 24 + k], m[r * c + 16 + k]) << r << " " << k;
  }
}

TEST_F(DropoutFp32Test, KeptFractionIsOneMinusP) {
  const int64_t b = 16, t = 256, c = 256;  // 2^20 elements
  const double n = static_cast<double>(b * t * c);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    for (int64_t layer : {0, 1}) {
      const std::vector<bool> m = mask(b, t, c, p, DropoutKey{42, layer, 0});
      double kept = 0;
      for (bool k : m) kept += k;
      const double sigma = std::sqrt(p * (1.0 - p) / n);
      EXPECT_NEAR(kept / n, 1.0 - p, 5 * sigma) << "p " << p << " layer " << layer;
    }
  }
}

TEST_F(DropoutFp32Test, BackwardIsTheVjpOfForward) {
  const Shape shape{2, 3, 8};
  const int64_t n = shape_numel(shape);
  const float p = 0.25f;
  const DropoutKey key{3, 2, 10};
  const Vec x = random_vec(n, -1.0, 1.0, 14), dy = random_vec(n, -1.0, 1.0, 15);
  const Vec numeric = ref::numeric_vjp(
      [&](const Vec& v) {
        Vec out(v.size());
        for (int64_t i = 0; i < n; ++i)
          out[i] = dropout_keeps(key, p, i / 24, i / 8 % 3, i % 8) ? v[i] * dropout_scale(p) : 0.0;
        return out;
      },
      x, dy);
  Tensor dx = empty(shape, DType::kF32);
  ops().dropout_backward(from_vec(dy, shape), dx, p, key);
  EXPECT_TRUE(near_max_norm(to_vec(dx), numeric, 1e-6));
  double zeros = 0;
  for (double v : numeric) zeros += v == 0.0;
  EXPECT_GT(zeros, 0) << "some elements dropped";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DropoutTest, ::testing::ValuesIn(kFloatDtypes), dtype_param_name);

}  // namespace
}  // namespace zero::test
