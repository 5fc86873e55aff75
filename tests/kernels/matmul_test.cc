// Ops::matmul on the CPU (oneDNN): every trans_a/trans_b combination, 2-D and
// batched 3-D, alpha, accumulate, bias, fp32 and bf16 compute with fp32, bf16
// and fp16 operands and outputs; then the three GEMMs of a Linear layer
// (forward, dX, dW) against finite differences of the double reference, and
// the += contract of the weight gradient.
//
// Tolerances:
//  * fp32 GEMM vs the double reference: 1e-5 relative to max|C|. An fp32 dot
//    product of K terms has error ~sqrt(K) * 2^-24 * sum|a||b| in practice
//    (K <= 19 here: ~1e-6 of max|C|); 1e-5 leaves room for blocked summation
//    orders and still catches any operand read wrongly (errors of O(1)).
//  * bf16 compute: the operands are rounded to bf16 (8-bit significand) before
//    the multiply, so the result differs from the fp32 one by ~2^-8 relative.
//    The expected value is therefore the double reference on the bf16-rounded
//    operands; accumulation is fp32, so the same 1e-5 then applies.
//  * bf16 / fp16 outputs add one rounding to the output dtype: per element
//    |c - e| <= u * |e| + 1e-5 * max|e| with u = 2^-8 (bf16), 2^-11 (fp16).
//  * Gradients vs reference::numeric_vjp (central differences in double,
//    error ~1e-9): 1e-4 relative to the max-norm, the fp32 GEMM error above
//    with margin.
#include <cstdlib>
#include <string>
#include <tuple>

#include "kernels/cpu/bf16_gemm_policy.h"
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

constexpr int64_t kM = 5, kN = 37, kK = 19, kBatch = 3;
constexpr double kGemmTol = 1e-5;
constexpr double kGradTol = 1e-4;

// op(A) op(B) for each of `batch` matrices (batch 0 means a single 2-D GEMM).
Vec batched_ref(const Vec& a, const Vec& b, int64_t batch, int64_t m, int64_t n, int64_t k,
                bool trans_a, bool trans_b) {
  const int64_t nb = batch == 0 ? 1 : batch;
  Vec c;
  for (int64_t i = 0; i < nb; ++i) {
    Vec ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    Vec bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
    Vec ci = ref::matmul(ai, bi, m, n, k, trans_a, trans_b);
    c.insert(c.end(), ci.begin(), ci.end());
  }
  return c;
}

Vec add_bias(const Vec& c, const Vec& bias) {
  Vec out(c);
  for (size_t i = 0; i < out.size(); ++i) out[i] += bias[i % bias.size()];
  return out;
}

Shape with_batch(int64_t batch, int64_t rows, int64_t cols) {
  return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols};
}

// Operands of one GEMM problem with their stored shapes.
struct Problem {
  int64_t batch;
  bool trans_a, trans_b;
  Vec a, b;
  Shape a_shape, b_shape, c_shape;

  Problem(int64_t batch_in, bool ta, bool tb, uint64_t seed)
      : batch(batch_in), trans_a(ta), trans_b(tb) {
    const int64_t nb = batch == 0 ? 1 : batch;
    a = random_vec(nb * kM * kK, -1.0, 1.0, seed);
    b = random_vec(nb * kK * kN, -1.0, 1.0, seed + 1);
    a_shape = ta ? with_batch(batch, kK, kM) : with_batch(batch, kM, kK);
    b_shape = tb ? with_batch(batch, kN, kK) : with_batch(batch, kK, kN);
    c_shape = with_batch(batch, kM, kN);
  }
  Vec expected(DType operand_rounding = DType::kF32) const {
    return batched_ref(rounded(a, operand_rounding), rounded(b, operand_rounding), batch, kM, kN,
                       kK, trans_a, trans_b);
  }
};

// ---------------------------------------------------------------- forward

class MatmulLayoutTest : public KernelTest,
                         public ::testing::WithParamInterface<std::tuple<bool, bool, bool>> {
 protected:
  Problem problem() const {
    const auto [trans_a, trans_b, batched] = GetParam();
    return Problem(batched ? kBatch : 0, trans_a, trans_b, 11);
  }
};

TEST_P(MatmulLayoutTest, Fp32MatchesReference) {
  const Problem p = problem();
  Tensor a = from_vec(p.a, p.a_shape), b = from_vec(p.b, p.b_shape);
  Tensor c = empty(p.c_shape, DType::kF32);
  ops().fill(c, 12345.0f);  // must be overwritten, not added to
  ops().matmul(a, b, c, {.trans_a = p.trans_a, .trans_b = p.trans_b});
  EXPECT_TRUE(near_max_norm(to_vec(c), p.expected(), kGemmTol));
}

TEST_P(MatmulLayoutTest, AlphaScalesAndAccumulateAdds) {
  const Problem p = problem();
  Tensor a = from_vec(p.a, p.a_shape), b = from_vec(p.b, p.b_shape);
  const Vec c0 = random_vec(shape_numel(p.c_shape), -2.0, 2.0, 5);
  Tensor c = from_vec(c0, p.c_shape);
  ops().matmul(a, b, c,
               {.trans_a = p.trans_a, .trans_b = p.trans_b, .alpha = 0.5f, .accumulate = true});
  EXPECT_TRUE(near_max_norm(to_vec(c), plus(c0, scaled(p.expected(), 0.5)), kGemmTol));

  ops().matmul(a, b, c, {.trans_a = p.trans_a, .trans_b = p.trans_b, .alpha = -2.0f});
  EXPECT_TRUE(near_max_norm(to_vec(c), scaled(p.expected(), -2.0), kGemmTol));
}

TEST_P(MatmulLayoutTest, BiasIsAddedPerColumn) {
  const Problem p = problem();
  Tensor a = from_vec(p.a, p.a_shape), b = from_vec(p.b, p.b_shape);
  // A bf16 bias is widened to fp32 exactly, so the expected bias is its bf16 value.
  const Vec bias = rounded(random_vec(kN, -3.0, 3.0, 7), DType::kBF16);
  Tensor bias_t = from_vec(bias, {kN}, DType::kBF16);
  Tensor c = empty(p.c_shape, DType::kF32);
  ops().matmul(a, b, c, {.trans_a = p.trans_a, .trans_b = p.trans_b}, bias_t);
  EXPECT_TRUE(near_max_norm(to_vec(c), add_bias(p.expected(), bias), kGemmTol));

  // accumulate + bias: C += op(A) op(B) + bias.
  const Vec c0 = random_vec(shape_numel(p.c_shape), -2.0, 2.0, 8);
  Tensor c_acc = from_vec(c0, p.c_shape);
  ops().matmul(a, b, c_acc, {.trans_a = p.trans_a, .trans_b = p.trans_b, .accumulate = true},
               bias_t);
  EXPECT_TRUE(near_max_norm(to_vec(c_acc), plus(c0, add_bias(p.expected(), bias)), kGemmTol));
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, MatmulLayoutTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "At" : "A") +
                                  (std::get<1>(info.param) ? "Bt" : "B") +
                                  (std::get<2>(info.param) ? "_batched" : "_2d");
                         });

// A long reduction into a small output runs as K slices each adding into C
// (onednn_matmul.h: K >= 8192 and K > 4·max(M, N)); K = 9001 gives three
// slices, the last shorter. Every layout, with alpha, accumulate and bias,
// must still be the one product. Tolerance: the fp32 dot-product error grows
// as sqrt(K), ~22x that of K = 19, so 1e-4 of max|C| (typical error here
// ~1e-6 of max|C|; a misplaced slice is an O(1) error).
using MatmulLongKTest = KernelTest;

TEST_F(MatmulLongKTest, SlicedReductionIsTheWholeProduct) {
  constexpr int64_t m = 3, n = 5, k = 9001;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "At" : "A") + (tb ? "Bt" : "B"));
      const Vec a = random_vec(m * k, -1.0, 1.0, 31), b = random_vec(k * n, -1.0, 1.0, 32);
      const Vec expected = ref::matmul(a, b, m, n, k, ta, tb);
      Tensor at = from_vec(a, ta ? Shape{k, m} : Shape{m, k});
      Tensor bt = from_vec(b, tb ? Shape{n, k} : Shape{k, n});
      Tensor c = empty({m, n}, DType::kF32);
      ops().fill(c, 12345.0f);
      ops().matmul(at, bt, c, {.trans_a = ta, .trans_b = tb});
      EXPECT_TRUE(near_max_norm(to_vec(c), expected, 1e-4));

      const Vec c0 = random_vec(m * n, -2.0, 2.0, 33);
      Tensor acc = from_vec(c0, {m, n});
      ops().matmul(at, bt, acc, {.trans_a = ta, .trans_b = tb, .alpha = 0.5f, .accumulate = true});
      EXPECT_TRUE(near_max_norm(to_vec(acc), plus(c0, scaled(expected, 0.5)), 1e-4));

      const Vec bias = random_vec(n, -3.0, 3.0, 34);  // added once, not once per slice
      Tensor acc_bias = from_vec(c0, {m, n});
      ops().matmul(at, bt, acc_bias, {.trans_a = ta, .trans_b = tb, .accumulate = true}, from_vec(bias, {n}));
      EXPECT_TRUE(near_max_norm(to_vec(acc_bias), plus(c0, add_bias(expected, bias)), 1e-4));
    }
  }
}

// Five slices (K = 12293: four of 2459 and a last of 2457, so the middle
// primitive is reused) into a bf16 output, which is staged in fp32, summed
// over the slices there and rounded to bf16 once, onto C: the result is
// within one bf16 rounding of the exact C + product.
TEST_F(MatmulLongKTest, ManySlicesIntoABf16OutputRoundOnce) {
  constexpr int64_t m = 4, n = 3, k = 12293;
  const Vec a = random_vec(m * k, -1.0, 1.0, 41), b = random_vec(k * n, -1.0, 1.0, 42);
  const Vec c0 = rounded(random_vec(m * n, -50.0, 50.0, 43), DType::kBF16);
  Tensor c = from_vec(c0, {m, n}, DType::kBF16);
  ops().matmul(from_vec(a, {m, k}), from_vec(b, {n, k}), c, {.trans_b = true, .accumulate = true});
  const Vec expected = plus(c0, ref::matmul(a, b, m, n, k, false, true));
  EXPECT_TRUE(near_each(to_vec(c), expected, unit_roundoff(DType::kBF16), 1e-4 * max_abs(expected)));
}

// ------------------------------------------------------ reduced precision

using MatmulPrecisionTest = KernelTest;

// The precision a GEMM asked for in `compute` rounds its operands to on this
// CPU: bf16, or fp32 where bf16 GEMMs run widened (bf16_gemm_policy.h); fp16
// GEMMs run as fp32.
DType operand_rounding(DType compute) {
  return compute == DType::kBF16 ? cpu::bf16_gemm_choice().gemm : DType::kF32;
}

// fp32 operands, bf16 compute: the inputs are rounded to bf16 first — or,
// where this CPU multiplies faster in fp32 (cpu::bf16_gemm_choice(); the
// test runs once more with ZE_CPU_BF16_GEMM=fp32), not rounded at all: then
// the product is the fp32 one, within bf16 rounding of the bf16 product.
TEST_F(MatmulPrecisionTest, Bf16ComputeRoundsOperandsAndAccumulatesInFp32) {
  const bool widened = operand_rounding(DType::kBF16) == DType::kF32;
  for (bool batched : {false, true}) {
    SCOPED_TRACE(batched ? "batched" : "2-D");
    const Problem p(batched ? kBatch : 0, false, true, 21);
    Tensor a = from_vec(p.a, p.a_shape), b = from_vec(p.b, p.b_shape);
    const Vec expected = widened ? p.expected() : p.expected(DType::kBF16);

    Tensor c32 = empty(p.c_shape, DType::kF32);
    ops().matmul(a, b, c32, {.trans_b = true, .compute = DType::kBF16});
    EXPECT_TRUE(near_max_norm(to_vec(c32), expected, kGemmTol));
    // The bf16 rounding is real (or really absent): the other product differs by far more.
    EXPECT_FALSE(near_max_norm(to_vec(c32), widened ? p.expected(DType::kBF16) : p.expected(), kGemmTol));
    // Either way within bf16 rounding of the bf16 product.
    EXPECT_TRUE(near_max_norm(to_vec(c32), p.expected(DType::kBF16), 8 * unit_roundoff(DType::kBF16)));

    const double u = unit_roundoff(DType::kBF16), abs = kGemmTol * max_abs(expected);
    Tensor c16 = empty(p.c_shape, DType::kBF16);
    ops().matmul(a, b, c16, {.trans_b = true, .compute = DType::kBF16});
    EXPECT_TRUE(near_each(to_vec(c16), expected, u, abs));

    // Accumulating into a bf16 C: one more bf16 rounding of (C0 + AB).
    const Vec c0 = rounded(random_vec(shape_numel(p.c_shape), -2.0, 2.0, 22), DType::kBF16);
    Tensor c_acc = from_vec(c0, p.c_shape, DType::kBF16);
    ops().matmul(a, b, c_acc, {.trans_b = true, .accumulate = true, .compute = DType::kBF16});
    EXPECT_TRUE(near_each(to_vec(c_acc), plus(c0, expected), u, abs));
  }
}

// bf16 operands stored as bf16 feed the GEMM directly (no cast).
TEST_F(MatmulPrecisionTest, Bf16OperandsAllLayouts) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      const Problem p(kBatch, ta, tb, 31);
      Tensor a = from_vec(p.a, p.a_shape, DType::kBF16), b = from_vec(p.b, p.b_shape, DType::kBF16);
      Tensor c = empty(p.c_shape, DType::kF32);
      ops().matmul(a, b, c, {.trans_a = ta, .trans_b = tb, .compute = DType::kBF16});
      EXPECT_TRUE(near_max_norm(to_vec(c), p.expected(DType::kBF16), kGemmTol));
    }
}

// The choice is definite and follows its rule: forced by ZE_CPU_BF16_GEMM,
// else bf16 unless fp32 measured more than 25% faster.
TEST_F(MatmulPrecisionTest, Bf16GemmChoiceFollowsItsRule) {
  const cpu::Bf16GemmChoice& c = cpu::bf16_gemm_choice();
  const char* forced = std::getenv("ZE_CPU_BF16_GEMM");
  const std::string f = forced != nullptr ? forced : "";
  if (f == "fp32" || f == "bf16") {
    EXPECT_EQ(c.gemm, f == "fp32" ? DType::kF32 : DType::kBF16);
    EXPECT_NE(c.reason.find("ZE_CPU_BF16_GEMM=" + f), std::string::npos) << c.reason;
    return;
  }
  EXPECT_GT(c.bf16_gflops, 0.0);
  EXPECT_GT(c.fp32_gflops, 0.0);
  EXPECT_EQ(c.gemm, c.fp32_gflops > 1.25 * c.bf16_gflops ? DType::kF32 : DType::kBF16) << c.reason;
  EXPECT_NE(c.reason.find("measured"), std::string::npos) << c.reason;
}

TEST_F(MatmulPrecisionTest, Fp16Operands) {
  const Problem p(0, true, false, 41);
  Tensor a = from_vec(p.a, p.a_shape, DType::kF16), b = from_vec(p.b, p.b_shape, DType::kF16);
  // fp16 -> fp32 is exact, so an fp32 GEMM is exact up to fp32 accumulation.
  const Vec exact16 = p.expected(DType::kF16);
  Tensor c = empty(p.c_shape, DType::kF32);
  ops().matmul(a, b, c, {.trans_a = true});
  EXPECT_TRUE(near_max_norm(to_vec(c), exact16, kGemmTol));

  // fp16 operands in a bf16 GEMM are rounded (once, to nearest even) to bf16
  // (or, widened, not at all).
  Vec a_bf16 = rounded(rounded(p.a, DType::kF16), operand_rounding(DType::kBF16));
  Vec b_bf16 = rounded(rounded(p.b, DType::kF16), operand_rounding(DType::kBF16));
  ops().matmul(a, b, c, {.trans_a = true, .compute = DType::kBF16});
  EXPECT_TRUE(near_max_norm(to_vec(c), ref::matmul(a_bf16, b_bf16, kM, kN, kK, true, false),
                            kGemmTol));

  // fp16 compute with an fp16 output (fp32 GEMM on CPUs without fp16 GEMMs),
  // overwritten and then accumulated into.
  const double u = unit_roundoff(DType::kF16), abs = kGemmTol * max_abs(exact16);
  Tensor c16 = empty(p.c_shape, DType::kF16);
  ops().matmul(a, b, c16, {.trans_a = true, .compute = DType::kF16});
  EXPECT_TRUE(near_each(to_vec(c16), exact16, u, abs));
  const Vec c0 = to_vec(c16);
  ops().matmul(a, b, c16, {.trans_a = true, .accumulate = true, .compute = DType::kF16});
  EXPECT_TRUE(near_each(to_vec(c16), plus(c0, exact16), u, 2 * abs));
}

// ------------------------------------------------------ Linear, as used in training

// y[N, out] = x[N, in] W[out, in]^T + b; dX = dY W; dW += dY^T X; db += colsum(dY).
constexpr int64_t kRows = 5, kIn = 19, kOut = 37;

struct LinearCase {
  DType param;    // W, b, dW, db
  DType compute;  // MatmulSpec::compute
};

void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << dtype_name(c.param) << " params, " << dtype_name(c.compute) << " GEMM";
}

class LinearGemmTest : public KernelTest, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(LinearGemmTest, ForwardAndGradientsMatchFiniteDifferences) {
  const auto [param, compute] = GetParam();
  const Vec x = random_vec(kRows * kIn, -1.0, 1.0, 51);
  const Vec w = rounded(random_vec(kOut * kIn, -0.5, 0.5, 52), param);
  const Vec bias = rounded(random_vec(kOut, -0.5, 0.5, 53), param);
  const Vec dy = random_vec(kRows * kOut, -1.0, 1.0, 54);
  Tensor x_t = from_vec(x, {kRows, kIn}), w_t = from_vec(w, {kOut, kIn}, param);
  Tensor b_t = from_vec(bias, {kOut}, param), dy_t = from_vec(dy, {kRows, kOut});
  // What the GEMM sees: activations rounded to the compute dtype.
  const Vec xr = rounded(x, operand_rounding(compute)), dyr = rounded(dy, operand_rounding(compute));

  Tensor y = empty({kRows, kOut}, DType::kF32);
  ops().matmul(x_t, w_t, y, {.trans_b = true, .compute = compute}, b_t);
  EXPECT_TRUE(near_max_norm(to_vec(y), ref::linear(xr, w, &bias, kRows, kIn, kOut), kGemmTol));

  Tensor dx = empty({kRows, kIn}, DType::kF32);
  ops().matmul(dy_t, w_t, dx, {.compute = compute});
  auto f_of_x = [&](const Vec& xv) { return ref::linear(xv, w, &bias, kRows, kIn, kOut); };
  EXPECT_TRUE(near_max_norm(to_vec(dx), ref::numeric_vjp(f_of_x, x, dyr), kGradTol)) << "dX";

  Tensor dw = empty({kOut, kIn}, param), db = empty({kOut}, param);
  ops().fill(dw, 0.0f), ops().fill(db, 0.0f);
  ops().matmul(dy_t, x_t, dw, {.trans_a = true, .accumulate = true, .compute = compute});
  ops().bias_backward(dy_t, db);
  auto f_of_w = [&](const Vec& wv) { return ref::linear(xr, wv, &bias, kRows, kIn, kOut); };
  auto f_of_b = [&](const Vec& bv) { return ref::linear(xr, w, &bv, kRows, kIn, kOut); };
  const Vec dw_ref = ref::numeric_vjp(f_of_w, w, dyr);
  const Vec db_ref = ref::numeric_vjp(f_of_b, bias, dy);  // bias_backward sums fp32 dY
  const double u = unit_roundoff(param);
  EXPECT_TRUE(near_each(to_vec(dw), dw_ref, u, kGradTol * max_abs(dw_ref))) << "dW";
  EXPECT_TRUE(near_each(to_vec(db), db_ref, u, kGradTol * max_abs(db_ref))) << "db";
}

// The weight-gradient GEMM accumulates: a second micro-batch doubles it, and a
// buffer that already holds a gradient is added to.
TEST_P(LinearGemmTest, WeightGradientAccumulates) {
  const auto [param, compute] = GetParam();
  const Vec x = random_vec(kRows * kIn, -1.0, 1.0, 61);
  const Vec dy = random_vec(kRows * kOut, -1.0, 1.0, 62);
  Tensor x_t = from_vec(x, {kRows, kIn}), dy_t = from_vec(dy, {kRows, kOut});
  const Vec g =
      ref::matmul(rounded(dy, operand_rounding(compute)), rounded(x, operand_rounding(compute)), kOut, kIn, kRows,
                  true, false);
  const double u = unit_roundoff(param), abs = kGemmTol * max_abs(g);
  const MatmulSpec spec{.trans_a = true, .accumulate = true, .compute = compute};

  Tensor dw = empty({kOut, kIn}, param);
  ops().fill(dw, 0.0f);
  ops().matmul(dy_t, x_t, dw, spec);
  const Vec once = to_vec(dw);
  EXPECT_TRUE(near_each(once, g, u, abs));
  ops().matmul(dy_t, x_t, dw, spec);
  EXPECT_TRUE(near_each(to_vec(dw), scaled(once, 2.0), u, 2 * abs)) << "second call";

  const Vec prefill = rounded(random_vec(kOut * kIn, -3.0, 3.0, 63), param);
  Tensor dw2 = from_vec(prefill, {kOut, kIn}, param);
  ops().matmul(dy_t, x_t, dw2, spec);
  EXPECT_TRUE(near_each(to_vec(dw2), plus(prefill, g), u, abs)) << "pre-filled";
}

// fp32 weights; bf16 gradients of an fp32 GEMM (staged in fp32, then added);
// bf16 weights and a bf16 GEMM (oneDNN adds into the bf16 gradient itself).
INSTANTIATE_TEST_SUITE_P(Dtypes, LinearGemmTest,
                         ::testing::Values(LinearCase{DType::kF32, DType::kF32},
                                           LinearCase{DType::kBF16, DType::kF32},
                                           LinearCase{DType::kBF16, DType::kBF16}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.param)) + "_params_" +
                                  std::string(dtype_name(info.param.compute)) + "_gemm";
                         });

}  // namespace
}  // namespace zero::test
