// Layer norm and GELU on the CPU (oneDNN): forward against the double
// reference, backward (dx, and layer norm's dgamma/dbeta) against central
// differences of it, and the += contract of dgamma/dbeta for fp32 and bf16
// parameter gradients. Rows of 37 columns, so vectorised loops have tails.
//
// Tolerances:
//  * layer norm forward, 1e-5 relative to max|y|: two fp32 reductions over 37
//    values (mean, variance) and a few fp32 operations per element give errors
//    of a few 2^-24 relative; 1e-5 leaves a wide margin and still catches an
//    unbiased variance (1.4e-2 here) or any element read from the wrong place.
//    mean and var are checked the same way.
//  * GELU forward, per element 1e-5 relative + 1e-6 absolute: oneDNN evaluates
//    tanh with its own polynomial, a few ulp accurate; the absolute part covers
//    values near the zero at x = 0 and the tiny negative tail.
//  * every gradient vs reference::numeric_vjp (central differences in double,
//    accurate to ~1e-9), 1e-4 relative to the max-norm of the gradient.
//  * bf16 dgamma/dbeta: one bf16 rounding of the stored sum, 2^-8 relative.
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

constexpr int64_t kRows = 5, kCols = 37;
constexpr float kEps = 1e-5f;
constexpr double kFwdTol = 1e-5;
constexpr double kGradTol = 1e-4;

// Rows with different means and spreads, so normalisation actually does work.
Vec layernorm_input() {
  Vec x = random_vec(kRows * kCols, -1.0, 1.0, 101);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) x[r * kCols + c] = x[r * kCols + c] * (0.5 + r) + 0.3 * r;
  return x;
}

class LayerNormTest : public KernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(LayerNormTest, ForwardMatchesReference) {
  const DType param = GetParam();
  const Vec x = layernorm_input();
  const Vec gamma = rounded(random_vec(kCols, 0.5, 1.5, 102), param);
  const Vec beta = rounded(random_vec(kCols, -0.5, 0.5, 103), param);
  Tensor x_t = from_vec(x, {kRows, kCols});
  Tensor y = empty({kRows, kCols}, DType::kF32);
  Tensor mean = empty({kRows}, DType::kF32), var = empty({kRows}, DType::kF32);
  Tensor gamma_t = from_vec(gamma, {kCols}, param), beta_t = from_vec(beta, {kCols}, param);
  ops().layernorm_forward(x_t, gamma_t, beta_t, kEps, y, mean, var);

  const Vec xf = rounded(x, DType::kF32);
  const Vec y_ref = ref::layernorm(xf, gamma, beta, kEps, kRows, kCols);
  EXPECT_TRUE(near_max_norm(to_vec(y), y_ref, kFwdTol));
  Vec mean_ref(kRows, 0.0), var_ref(kRows, 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) mean_ref[r] += xf[r * kCols + c] / kCols;
    for (int64_t c = 0; c < kCols; ++c) {
      const double d = xf[r * kCols + c] - mean_ref[r];
      var_ref[r] += d * d / kCols;  // biased, as the backward pass expects
    }
  }
  EXPECT_TRUE(near_max_norm(to_vec(mean), mean_ref, kFwdTol)) << "mean";
  EXPECT_TRUE(near_max_norm(to_vec(var), var_ref, kFwdTol)) << "var";
}

TEST_P(LayerNormTest, BackwardMatchesFiniteDifferences) {
  const DType param = GetParam();
  const Vec x = rounded(layernorm_input(), DType::kF32);
  const Vec gamma = rounded(random_vec(kCols, 0.5, 1.5, 104), param);
  const Vec beta = rounded(random_vec(kCols, -0.5, 0.5, 105), param);
  const Vec dy = rounded(random_vec(kRows * kCols, -1.0, 1.0, 106), DType::kF32);
  Tensor x_t = from_vec(x, {kRows, kCols}), dy_t = from_vec(dy, {kRows, kCols});
  Tensor gamma_t = from_vec(gamma, {kCols}, param), beta_t = from_vec(beta, {kCols}, param);
  Tensor y = empty({kRows, kCols}, DType::kF32);
  Tensor mean = empty({kRows}, DType::kF32), var = empty({kRows}, DType::kF32);
  ops().layernorm_forward(x_t, gamma_t, beta_t, kEps, y, mean, var);

  Tensor dx = empty({kRows, kCols}, DType::kF32);
  ops().fill(dx, 777.0f);  // overwritten, not accumulated
  Tensor dgamma = empty({kCols}, param), dbeta = empty({kCols}, param);
  ops().fill(dgamma, 0.0f), ops().fill(dbeta, 0.0f);
  ops().layernorm_backward(dy_t, x_t, gamma_t, mean, var, kEps, dx, dgamma, dbeta);

  auto ln = [&](const Vec& xv, const Vec& g, const Vec& b) {
    return ref::layernorm(xv, g, b, kEps, kRows, kCols);
  };
  const Vec dx_ref = ref::numeric_vjp([&](const Vec& v) { return ln(v, gamma, beta); }, x, dy);
  const Vec dg_ref = ref::numeric_vjp([&](const Vec& v) { return ln(x, v, beta); }, gamma, dy);
  const Vec db_ref = ref::numeric_vjp([&](const Vec& v) { return ln(x, gamma, v); }, beta, dy);
  EXPECT_TRUE(near_max_norm(to_vec(dx), dx_ref, kGradTol)) << "dx";
  const double u = unit_roundoff(param);
  EXPECT_TRUE(near_each(to_vec(dgamma), dg_ref, u, kGradTol * max_abs(dg_ref))) << "dgamma";
  EXPECT_TRUE(near_each(to_vec(dbeta), db_ref, u, kGradTol * max_abs(db_ref))) << "dbeta";
}

TEST_P(LayerNormTest, ParameterGradientsAccumulate) {
  const DType param = GetParam();
  const Vec x = layernorm_input();
  const Vec gamma = random_vec(kCols, 0.5, 1.5, 107), beta = random_vec(kCols, -0.5, 0.5, 108);
  const Vec dy = random_vec(kRows * kCols, -1.0, 1.0, 109);
  Tensor x_t = from_vec(x, {kRows, kCols}), dy_t = from_vec(dy, {kRows, kCols});
  Tensor gamma_t = from_vec(gamma, {kCols}, param), beta_t = from_vec(beta, {kCols}, param);
  Tensor y = empty({kRows, kCols}, DType::kF32), dx = empty({kRows, kCols}, DType::kF32);
  Tensor mean = empty({kRows}, DType::kF32), var = empty({kRows}, DType::kF32);
  ops().layernorm_forward(x_t, gamma_t, beta_t, kEps, y, mean, var);

  // The gradient of one call, in fp32.
  Tensor dg32 = empty({kCols}, DType::kF32), db32 = empty({kCols}, DType::kF32);
  ops().fill(dg32, 0.0f), ops().fill(db32, 0.0f);
  ops().layernorm_backward(dy_t, x_t, gamma_t, mean, var, kEps, dx, dg32, db32);
  const Vec dg = to_vec(dg32), db = to_vec(db32);
  const double u = unit_roundoff(param);

  // Two calls into a zeroed buffer: twice the gradient (in bf16, two roundings).
  Tensor dgamma = empty({kCols}, param), dbeta = empty({kCols}, param);
  ops().fill(dgamma, 0.0f), ops().fill(dbeta, 0.0f);
  ops().layernorm_backward(dy_t, x_t, gamma_t, mean, var, kEps, dx, dgamma, dbeta);
  ops().layernorm_backward(dy_t, x_t, gamma_t, mean, var, kEps, dx, dgamma, dbeta);
  EXPECT_TRUE(near_each(to_vec(dgamma), scaled(dg, 2.0), 2 * u, 1e-6 * max_abs(dg))) << "dgamma x2";
  EXPECT_TRUE(near_each(to_vec(dbeta), scaled(db, 2.0), 2 * u, 1e-6 * max_abs(db))) << "dbeta x2";

  // A buffer holding an earlier gradient is added to.
  const Vec pre_g = rounded(random_vec(kCols, -5.0, 5.0, 110), param);
  const Vec pre_b = rounded(random_vec(kCols, -5.0, 5.0, 111), param);
  Tensor dgamma2 = from_vec(pre_g, {kCols}, param), dbeta2 = from_vec(pre_b, {kCols}, param);
  ops().layernorm_backward(dy_t, x_t, gamma_t, mean, var, kEps, dx, dgamma2, dbeta2);
  EXPECT_TRUE(near_each(to_vec(dgamma2), plus(pre_g, dg), u, 1e-6 * max_abs(dg))) << "dgamma";
  EXPECT_TRUE(near_each(to_vec(dbeta2), plus(pre_b, db), u, 1e-6 * max_abs(db))) << "dbeta";
}

INSTANTIATE_TEST_SUITE_P(ParamDtypes, LayerNormTest, ::testing::Values(DType::kF32, DType::kBF16),
                         dtype_param_name);

// ---------------------------------------------------------------- GELU

using GeluTest = KernelTest;

TEST_F(GeluTest, ForwardMatchesReference) {
  // [-8, 8) covers the flat negative tail, the bend and the linear region.
  const Vec x = rounded(random_vec(kRows * kCols, -8.0, 8.0, 121), DType::kF32);
  Tensor y = empty({kRows, kCols}, DType::kF32);
  ops().gelu_forward(from_vec(x, {kRows, kCols}), y);
  EXPECT_TRUE(near_each(to_vec(y), ref::gelu(x), 1e-5, 1e-6));
}

TEST_F(GeluTest, BackwardMatchesFiniteDifferences) {
  const Vec x = rounded(random_vec(kRows * kCols, -5.0, 5.0, 122), DType::kF32);
  const Vec dy = rounded(random_vec(kRows * kCols, -1.0, 1.0, 123), DType::kF32);
  Tensor dx = empty({kRows, kCols}, DType::kF32);
  ops().gelu_backward(from_vec(x, {kRows, kCols}), from_vec(dy, {kRows, kCols}), dx);
  EXPECT_TRUE(near_max_norm(to_vec(dx), ref::numeric_vjp(ref::gelu, x, dy), kGradTol));
}

}  // namespace
}  // namespace zero::test
