// The Llama family's ops on the CPU: RMSNorm (and Gemma's (1 + gamma) form),
// rotary embeddings, the SwiGLU gate and Gemma's GeGLU gate, forward against
// the double references and backward against
// central differences of them, as the other op tests. Rows of 37 columns
// (RMSNorm, SwiGLU) and heads of 2 x 19 values (RoPE), so vectorised loops
// have tails.
//
// Tolerances:
//  * RMSNorm forward 1e-5 relative to max|y| (one fp32 reduction over 37
//    values); SwiGLU forward 1e-5 relative + 1e-6 absolute per element (our
//    exp is a few ulp); RoPE 1e-5 relative to max|y|: the reference rounds
//    the angle to fp32 too, as Hugging Face does (at position 1000 that
//    rounding alone is 3e-5 radians, more than the tolerance).
//  * gradients vs reference::numeric_vjp, 1e-4 relative to their max-norm;
//    bf16 dgamma one bf16 rounding more.
#include "kernels/rope.h"
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

constexpr int64_t kRows = 5, kCols = 37;
constexpr float kEps = 1e-6f;
constexpr double kFwdTol = 1e-5;
constexpr double kGradTol = 1e-4;

Vec norm_input() {
  Vec x = random_vec(kRows * kCols, -1.0, 1.0, 201);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) x[r * kCols + c] = x[r * kCols + c] * (0.5 + r) + 0.3 * r;
  return rounded(x, DType::kF32);
}

class RmsNormTest : public KernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(RmsNormTest, ForwardMatchesReference) {
  const DType param = GetParam();
  const Vec x = norm_input();
  const Vec gamma = rounded(random_vec(kCols, 0.5, 1.5, 202), param);
  Tensor y = empty({kRows, kCols}, DType::kF32), rstd = empty({kRows}, DType::kF32);
  ops().rmsnorm_forward(from_vec(x, {kRows, kCols}), from_vec(gamma, {kCols}, param), kEps, y, rstd);
  EXPECT_TRUE(near_max_norm(to_vec(y), ref::rmsnorm(x, gamma, kEps, kRows, kCols), kFwdTol));
  Vec rstd_ref(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    double ms = 0.0;
    for (int64_t c = 0; c < kCols; ++c) ms += x[r * kCols + c] * x[r * kCols + c] / kCols;
    rstd_ref[r] = 1.0 / std::sqrt(ms + kEps);
  }
  EXPECT_TRUE(near_max_norm(to_vec(rstd), rstd_ref, kFwdTol)) << "rstd";
}

TEST_P(RmsNormTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const DType param = GetParam();
  const Vec x = norm_input();
  const Vec gamma = rounded(random_vec(kCols, 0.5, 1.5, 203), param);
  const Vec dy = rounded(random_vec(kRows * kCols, -1.0, 1.0, 204), DType::kF32);
  Tensor x_t = from_vec(x, {kRows, kCols}), gamma_t = from_vec(gamma, {kCols}, param);
  Tensor y = empty({kRows, kCols}, DType::kF32), rstd = empty({kRows}, DType::kF32);
  ops().rmsnorm_forward(x_t, gamma_t, kEps, y, rstd);

  Tensor dx = empty({kRows, kCols}, DType::kF32);
  ops().fill(dx, 777.0f);  // overwritten, not accumulated
  const Vec pre = rounded(random_vec(kCols, -5.0, 5.0, 205), param);
  Tensor dgamma = from_vec(pre, {kCols}, param);  // an earlier gradient: added to
  ops().rmsnorm_backward(from_vec(dy, {kRows, kCols}), x_t, gamma_t, rstd, dx, dgamma);

  auto f = [&](const Vec& xv, const Vec& g) { return ref::rmsnorm(xv, g, kEps, kRows, kCols); };
  const Vec dx_ref = ref::numeric_vjp([&](const Vec& v) { return f(v, gamma); }, x, dy);
  const Vec dg_ref = ref::numeric_vjp([&](const Vec& v) { return f(x, v); }, gamma, dy);
  EXPECT_TRUE(near_max_norm(to_vec(dx), dx_ref, kGradTol)) << "dx";
  EXPECT_TRUE(near_each(to_vec(dgamma), plus(pre, dg_ref), unit_roundoff(param), kGradTol * max_abs(dg_ref)))
      << "dgamma";
}

// Gemma's form: y = x rstd (1 + gamma), gamma stored (near 0); dgamma the same.
TEST_P(RmsNormTest, UnitOffsetScalesByOnePlusGamma) {
  const DType param = GetParam();
  const Vec x = norm_input();
  const Vec gamma = rounded(random_vec(kCols, -0.5, 0.5, 206), param);
  Vec one_plus(gamma.size());
  for (size_t i = 0; i < gamma.size(); ++i) one_plus[i] = 1.0 + gamma[i];
  const Vec dy = rounded(random_vec(kRows * kCols, -1.0, 1.0, 207), DType::kF32);
  Tensor x_t = from_vec(x, {kRows, kCols}), gamma_t = from_vec(gamma, {kCols}, param);
  Tensor y = empty({kRows, kCols}, DType::kF32), rstd = empty({kRows}, DType::kF32);
  ops().rmsnorm_forward(x_t, gamma_t, kEps, y, rstd, true);
  EXPECT_TRUE(near_max_norm(to_vec(y), ref::rmsnorm(x, one_plus, kEps, kRows, kCols), kFwdTol));

  Tensor dx = empty({kRows, kCols}, DType::kF32);
  Tensor dgamma = from_vec(Vec(kCols, 0.0), {kCols}, param);
  ops().rmsnorm_backward(from_vec(dy, {kRows, kCols}), x_t, gamma_t, rstd, dx, dgamma, true);
  auto f = [&](const Vec& xv, const Vec& g) {
    Vec w(g.size());
    for (size_t i = 0; i < g.size(); ++i) w[i] = 1.0 + g[i];
    return ref::rmsnorm(xv, w, kEps, kRows, kCols);
  };
  const Vec dx_ref = ref::numeric_vjp([&](const Vec& v) { return f(v, gamma); }, x, dy);
  const Vec dg_ref = ref::numeric_vjp([&](const Vec& v) { return f(x, v); }, gamma, dy);
  EXPECT_TRUE(near_max_norm(to_vec(dx), dx_ref, kGradTol)) << "dx";
  EXPECT_TRUE(near_each(to_vec(dgamma), dg_ref, unit_roundoff(param), kGradTol * max_abs(dg_ref))) << "dgamma";
}

INSTANTIATE_TEST_SUITE_P(ParamDtypes, RmsNormTest, ::testing::Values(DType::kF32, DType::kBF16), dtype_param_name);

// ---------------------------------------------------------------- RoPE

class RopeTest : public KernelTest {
 protected:
  static constexpr int64_t kB = 2, kH = 3, kT = 7, kD = 38;
  const Shape shape{kB, kH, kT, kD};
  Vec inv_freq(const RopeFreqs& f) const { return Vec(f.inv_freq, f.inv_freq + f.half); }
};

TEST_F(RopeTest, ForwardMatchesReferenceAtAnyFirstPosition) {
  for (const RopeScaling& scaling : {RopeScaling{}, RopeScaling{"llama3", 8.0, 1.0, 4.0, 64}}) {
    absl::StatusOr<RopeFreqs> f = rope_frequencies(kD, 10000.0, scaling);
    ASSERT_TRUE(f.ok()) << f.status();
    const Vec x = rounded(random_vec(kB * kH * kT * kD, -1.0, 1.0, 211), DType::kF32);
    for (const int64_t first : {int64_t{0}, int64_t{1000}}) {
      Tensor y = empty(shape, DType::kF32);
      ops().rope(from_vec(x, shape), y, *f, first, false);
      EXPECT_TRUE(near_max_norm(to_vec(y), ref::rope(x, inv_freq(*f), kB * kH, kT, kD, first), kFwdTol))
          << scaling.type << " from " << first;
    }
  }
}

TEST_F(RopeTest, InverseIsTheBackwardAndUndoesTheRotationInPlace) {
  absl::StatusOr<RopeFreqs> f = rope_frequencies(kD, 500000.0, {});
  ASSERT_TRUE(f.ok());
  const Vec x = rounded(random_vec(kB * kH * kT * kD, -1.0, 1.0, 212), DType::kF32);
  const Vec dy = rounded(random_vec(x.size(), -1.0, 1.0, 213), DType::kF32);
  Tensor dx = empty(shape, DType::kF32);
  ops().rope(from_vec(dy, shape), dx, *f, 3, true);
  const Vec want = ref::numeric_vjp([&](const Vec& v) { return ref::rope(v, inv_freq(*f), kB * kH, kT, kD, 3); }, x, dy);
  EXPECT_TRUE(near_max_norm(to_vec(dx), want, kGradTol)) << "dx = R^T dy";

  Tensor t = from_vec(x, shape);
  ops().rope(t, t, *f, 3, false);
  ops().rope(t, t, *f, 3, true);
  EXPECT_TRUE(near_max_norm(to_vec(t), x, 1e-6)) << "R^T R x = x, in place";
}

TEST(RopeFrequencies, FollowHuggingFaceAndRefuseWhatTheyDoNotImplement) {
  absl::StatusOr<RopeFreqs> plain = rope_frequencies(8, 10000.0, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->half, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(plain->inv_freq[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
  absl::StatusOr<RopeFreqs> linear = rope_frequencies(8, 10000.0, {"linear", 4.0});
  ASSERT_TRUE(linear.ok());
  EXPECT_FLOAT_EQ(linear->inv_freq[1], plain->inv_freq[1] / 4.0f);
  // llama3 with an original context of 16 and factors 1 / 4: wavelengths
  // 2 pi / w above 16 are divided by 8, below 4 kept, the band between blended.
  absl::StatusOr<RopeFreqs> l3 = rope_frequencies(8, 10000.0, {"llama3", 8.0, 1.0, 4.0, 16});
  ASSERT_TRUE(l3.ok());
  for (int i = 0; i < 4; ++i) {
    const double w = plain->inv_freq[i], wavelen = 2 * M_PI / w;
    if (wavelen < 4) EXPECT_FLOAT_EQ(l3->inv_freq[i], plain->inv_freq[i]) << i;
    else if (wavelen > 16) EXPECT_FLOAT_EQ(l3->inv_freq[i], plain->inv_freq[i] / 8.0f) << i;
    else EXPECT_TRUE(l3->inv_freq[i] < plain->inv_freq[i] && l3->inv_freq[i] > plain->inv_freq[i] / 8.0f) << i;
  }
  absl::StatusOr<RopeFreqs> yarn = rope_frequencies(8, 10000.0, {"yarn", 4.0});
  ASSERT_FALSE(yarn.ok());
  EXPECT_NE(yarn.status().message().find("\"yarn\" is not supported"), std::string::npos) << yarn.status();
  EXPECT_FALSE(rope_frequencies(7, 10000.0, {}).ok());
  EXPECT_FALSE(rope_frequencies(8, 0.0, {}).ok());
  EXPECT_FALSE(rope_frequencies(8, 10000.0, {"linear", 0.5}).ok());
}

// ---------------------------------------------------------------- SwiGLU

using GatedBackward = void (Ops::*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);

// SwiGLU's and GeGLU's tests: the backward of h = reference(gate, up)
// against finite differences of the reference, and written over gate and up
// (dgate, dup there) the same bits.
class GatedTest : public KernelTest {
 protected:
  void check_backward(GatedBackward backward, Vec (*reference)(const Vec&, const Vec&), uint64_t seed) {
    const Vec g = rounded(random_vec(kRows * kCols, -6.0, 6.0, seed), DType::kF32);
    const Vec u = rounded(random_vec(kRows * kCols, -2.0, 2.0, seed + 1), DType::kF32);
    const Vec dh = rounded(random_vec(kRows * kCols, -1.0, 1.0, seed + 2), DType::kF32);
    const Shape s{kRows, kCols};
    Tensor dg = empty(s, DType::kF32), du = empty(s, DType::kF32);
    (ops().*backward)(from_vec(g, s), from_vec(u, s), from_vec(dh, s), dg, du);
    EXPECT_TRUE(near_max_norm(to_vec(dg), ref::numeric_vjp([&](const Vec& v) { return reference(v, u); }, g, dh),
                              kGradTol)) << "dgate";
    EXPECT_TRUE(near_max_norm(to_vec(du), ref::numeric_vjp([&](const Vec& v) { return reference(g, v); }, u, dh),
                              kGradTol)) << "dup";
    Tensor gt = from_vec(g, s), ut = from_vec(u, s);
    (ops().*backward)(gt, ut, from_vec(dh, s), gt, ut);
    EXPECT_TRUE(same_bits(gt, dg));
    EXPECT_TRUE(same_bits(ut, du));
  }
};

using SwiGluTest = GatedTest;

TEST_F(SwiGluTest, ForwardMatchesReference) {
  const Vec g = rounded(random_vec(kRows * kCols, -8.0, 8.0, 221), DType::kF32);
  const Vec u = rounded(random_vec(kRows * kCols, -2.0, 2.0, 222), DType::kF32);
  Tensor h = empty({kRows, kCols}, DType::kF32);
  ops().swiglu_forward(from_vec(g, {kRows, kCols}), from_vec(u, {kRows, kCols}), h);
  EXPECT_TRUE(near_each(to_vec(h), ref::swiglu(g, u), 1e-5, 1e-6));
}

TEST_F(SwiGluTest, BackwardMatchesFiniteDifferencesAlsoInPlace) {
  check_backward(&Ops::swiglu_backward, [](const Vec& g, const Vec& u) { return ref::swiglu(g, u); },
                       223);
}

// ---------------------------------------------------------------- GeGLU

Vec geglu_ref(const Vec& gate, const Vec& up) {
  Vec h = ref::gelu(gate);
  for (size_t i = 0; i < h.size(); ++i) h[i] *= up[i];
  return h;
}

using GeGluTest = GatedTest;

TEST_F(GeGluTest, ForwardMatchesReference) {
  const Vec g = rounded(random_vec(kRows * kCols, -8.0, 8.0, 231), DType::kF32);
  const Vec u = rounded(random_vec(kRows * kCols, -2.0, 2.0, 232), DType::kF32);
  Tensor h = empty({kRows, kCols}, DType::kF32);
  ops().geglu_forward(from_vec(g, {kRows, kCols}), from_vec(u, {kRows, kCols}), h);
  EXPECT_TRUE(near_each(to_vec(h), geglu_ref(g, u), 1e-5, 1e-6));
}

TEST_F(GeGluTest, BackwardMatchesFiniteDifferencesAlsoInPlace) {
  check_backward(&Ops::geglu_backward, geglu_ref, 233);
}

// ---------------------------------------------------------------- fused gate/up rows

// glu_rows_* on a fused [N, 2F] (each row its gate, then its up) give the
// bits the separate ops give on the gate and up halves, out of place and over
// gate_up; the base class's row-by-row default and the CPU's one pass alike.
TEST_F(GeGluTest, FusedRowsMatchTheSeparateOpsBitForBit) {
  const Shape s{kRows, kCols}, fused{kRows, 2 * kCols};
  const Vec g = rounded(random_vec(kRows * kCols, -6.0, 6.0, 251), DType::kF32);
  const Vec u = rounded(random_vec(kRows * kCols, -2.0, 2.0, 252), DType::kF32);
  const Vec dh = rounded(random_vec(kRows * kCols, -1.0, 1.0, 253), DType::kF32);
  Vec gu(static_cast<size_t>(2 * kRows * kCols));
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) {
      gu[static_cast<size_t>(2 * r * kCols + c)] = g[static_cast<size_t>(r * kCols + c)];
      gu[static_cast<size_t>((2 * r + 1) * kCols + c)] = u[static_cast<size_t>(r * kCols + c)];
    }
  for (Ops::Glu kind : {Ops::Glu::kSwiGlu, Ops::Glu::kGeGlu}) {
    const bool swiglu = kind == Ops::Glu::kSwiGlu;
    Tensor h = empty(s, DType::kF32), dg = empty(s, DType::kF32), du = empty(s, DType::kF32);
    if (swiglu) {
      ops().swiglu_forward(from_vec(g, s), from_vec(u, s), h);
      ops().swiglu_backward(from_vec(g, s), from_vec(u, s), from_vec(dh, s), dg, du);
    } else {
      ops().geglu_forward(from_vec(g, s), from_vec(u, s), h);
      ops().geglu_backward(from_vec(g, s), from_vec(u, s), from_vec(dh, s), dg, du);
    }
    Vec want_d(gu.size());
    const Vec dgv = to_vec(dg), duv = to_vec(du);
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kCols; ++c) {
        want_d[static_cast<size_t>(2 * r * kCols + c)] = dgv[static_cast<size_t>(r * kCols + c)];
        want_d[static_cast<size_t>((2 * r + 1) * kCols + c)] = duv[static_cast<size_t>(r * kCols + c)];
      }
    for (bool base : {false, true}) {
      SCOPED_TRACE(std::string(swiglu ? "swiglu" : "geglu") + (base ? " (row-by-row default)" : ""));
      Tensor h2 = empty(s, DType::kF32), d2 = empty(fused, DType::kF32), in_place = from_vec(gu, fused);
      if (base) {
        ops().Ops::glu_rows_forward(kind, from_vec(gu, fused), h2);
        ops().Ops::glu_rows_backward(kind, from_vec(gu, fused), from_vec(dh, s), d2);
        ops().Ops::glu_rows_backward(kind, in_place, from_vec(dh, s), in_place);
      } else {
        ops().glu_rows_forward(kind, from_vec(gu, fused), h2);
        ops().glu_rows_backward(kind, from_vec(gu, fused), from_vec(dh, s), d2);
        ops().glu_rows_backward(kind, in_place, from_vec(dh, s), in_place);
      }
      EXPECT_TRUE(same_bits(h2, h));
      EXPECT_TRUE(same_bits(d2, from_vec(want_d, fused)));
      EXPECT_TRUE(same_bits(in_place, from_vec(want_d, fused)));
    }
  }
}

// ---------------------------------------------------------------- logit soft-capping

TEST_F(GeGluTest, SoftcapMatchesReferenceAndFiniteDifferences) {
  const float cap = 3.0f;
  const Vec x = rounded(random_vec(kRows * kCols, -12.0, 12.0, 241), DType::kF32);
  const Vec dy = rounded(random_vec(kRows * kCols, -1.0, 1.0, 242), DType::kF32);
  auto softcap = [&](const Vec& v) {
    Vec y(v.size());
    for (size_t i = 0; i < v.size(); ++i) y[i] = cap * std::tanh(v[i] / cap);
    return y;
  };
  const Shape s{kRows, kCols};
  Tensor y = empty(s, DType::kF32), dx = empty(s, DType::kF32);
  ops().softcap_forward(from_vec(x, s), cap, y);
  EXPECT_TRUE(near_each(to_vec(y), softcap(x), 1e-5, 1e-6));
  ops().softcap_backward(y, from_vec(dy, s), cap, dx);
  EXPECT_TRUE(near_max_norm(to_vec(dx), ref::numeric_vjp(softcap, x, dy), kGradTol)) << "dx";
}

}  // namespace
}  // namespace zero::test
