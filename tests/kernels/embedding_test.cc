// Token and position embeddings on the CPU (our SIMD kernels): forward
// gathers and adds from fp32, bf16 and fp16 tables; backward scatters into the
// table gradient, with repeated token ids, against central differences of the
// double reference; and the += contract of both table gradients for fp32 and
// bf16 gradient dtypes. 37 columns, so every row has a vector tail.
//
// Tolerances:
//  * forward is exact: a gather widens each table value to fp32 exactly, and
//    add_positional is one fp32 addition per element, compared against the
//    same addition written out here.
//  * backward vs reference::numeric_vjp (central differences in double,
//    ~1e-9 accurate): 1e-4 relative to the max-norm. The sums themselves are
//    of <= 3 fp32 terms, so the fp32 result is far closer than that.
//  * 16-bit gradients: every addition into the table rounds to the table
//    dtype (unit roundoff u = 2^-8 for bf16), so a row that receives k
//    additions is within k * u * (largest partial sum) of the exact sum.
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

constexpr int64_t kVocab = 11, kCols = 37;
constexpr double kGradTol = 1e-4;
// Token 3 three times and token 7 twice: their gradient rows must sum.
const std::vector<int32_t> kIds = {3, 0, 7, 3, 10, 7, 3, 5};

class EmbeddingTest : public KernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(EmbeddingTest, ForwardGathersRows) {
  const DType dtype = GetParam();
  const Vec table = rounded(random_vec(kVocab * kCols, -2.0, 2.0, 301), dtype);
  Tensor out = empty({static_cast<int64_t>(kIds.size()), kCols}, DType::kF32);
  ops().embedding_forward(from_ids(kIds), from_vec(table, {kVocab, kCols}, dtype), out);
  EXPECT_EQ(to_vec(out), ref::embedding(kIds, table, kCols));
}

TEST_P(EmbeddingTest, BackwardMatchesFiniteDifferences) {
  const DType dtype = GetParam();
  const int64_t n = static_cast<int64_t>(kIds.size());
  const Vec table = random_vec(kVocab * kCols, -2.0, 2.0, 302);
  const Vec dout = rounded(random_vec(n * kCols, -1.0, 1.0, 303), DType::kF32);
  Tensor dtable = empty({kVocab, kCols}, dtype);
  ops().fill(dtable, 0.0f);
  ops().embedding_backward(from_ids(kIds), from_vec(dout, {n, kCols}), dtable);
  const Vec want = ref::numeric_vjp(
      [](const Vec& t) { return ref::embedding(kIds, t, kCols); }, table, dout);
  // In a 16-bit table each of the <= 3 additions into a row rounds a partial
  // sum of magnitude <= 3 (|dout| <= 1).
  const double rounding = 3 * unit_roundoff(dtype) * 3.0;
  EXPECT_TRUE(near_each(to_vec(dtable), want, 0.0, kGradTol * max_abs(want) + rounding));
  // Rows of tokens that do not occur stay exactly 0.
  for (int64_t c = 0; c < kCols; ++c) EXPECT_EQ(to_vec(dtable)[1 * kCols + c], 0.0);
}

TEST_P(EmbeddingTest, BackwardAccumulates) {
  const DType dtype = GetParam();
  const int64_t n = static_cast<int64_t>(kIds.size());
  const Vec dout = random_vec(n * kCols, -1.0, 1.0, 304);
  Tensor ids = from_ids(kIds), dout_t = from_vec(dout, {n, kCols});
  Vec grad(kVocab * kCols, 0.0);  // the exact gradient of one call
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < kCols; ++c)
      grad[kIds[r] * kCols + c] += static_cast<float>(dout[r * kCols + c]);
  // Rows are added one at a time, so in a 16-bit table a token seen 3 times
  // rounds 3 partial sums per call; bound each rounding by the largest partial
  // sum (|dout| <= 1, |prefill| <= 4).
  const double u = unit_roundoff(dtype), fp32_abs = 1e-6 * max_abs(grad);

  Tensor dtable = empty({kVocab, kCols}, dtype);
  ops().fill(dtable, 0.0f);
  ops().embedding_backward(ids, dout_t, dtable);
  ops().embedding_backward(ids, dout_t, dtable);
  EXPECT_TRUE(near_each(to_vec(dtable), scaled(grad, 2.0), 0.0, fp32_abs + 6 * u * 6.0))
      << "two calls";

  const Vec prefill = rounded(random_vec(kVocab * kCols, -4.0, 4.0, 305), dtype);
  Tensor dtable2 = from_vec(prefill, {kVocab, kCols}, dtype);
  ops().embedding_backward(ids, dout_t, dtable2);
  EXPECT_TRUE(near_each(to_vec(dtable2), plus(prefill, grad), 0.0, fp32_abs + 3 * u * 7.0))
      << "pre-filled";
}

INSTANTIATE_TEST_SUITE_P(TableDtypes, EmbeddingTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         dtype_param_name);

// ---------------------------------------------------------------- positions

constexpr int64_t kBatch = 3, kSeq = 5, kMaxSeq = 7;  // the table has more rows than T

class PositionalTest : public KernelTest, public ::testing::WithParamInterface<DType> {};

TEST_P(PositionalTest, AddPositionalAddsRowT) {
  const DType dtype = GetParam();
  const Vec x = random_vec(kBatch * kSeq * kCols, -1.0, 1.0, 311);
  const Vec table = rounded(random_vec(kMaxSeq * kCols, -1.0, 1.0, 312), dtype);
  Tensor x_t = from_vec(x, {kBatch, kSeq, kCols});
  ops().add_positional(x_t, from_vec(table, {kMaxSeq, kCols}, dtype));
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < kSeq; ++t)
      for (int64_t c = 0; c < kCols; ++c) {
        const int64_t i = (b * kSeq + t) * kCols + c;
        ASSERT_EQ(x_t.f32()[i], static_cast<float>(x[i]) + static_cast<float>(table[t * kCols + c]))
            << "b=" << b << " t=" << t << " c=" << c;
      }
}

TEST_P(PositionalTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const DType dtype = GetParam();
  const Vec x = random_vec(kBatch * kSeq * kCols, -1.0, 1.0, 313);
  const Vec table = random_vec(kMaxSeq * kCols, -1.0, 1.0, 314);
  const Vec dy = rounded(random_vec(kBatch * kSeq * kCols, -1.0, 1.0, 315), DType::kF32);
  auto forward = [&](const Vec& tab) {
    Vec y(x);
    for (size_t i = 0; i < y.size(); ++i) y[i] += tab[(i / kCols) % kSeq * kCols + i % kCols];
    return y;
  };
  const Vec grad = ref::numeric_vjp(forward, table, dy);  // rows >= kSeq: 0
  Tensor dy_t = from_vec(dy, {kBatch, kSeq, kCols});
  const double u = unit_roundoff(dtype), abs = kGradTol * max_abs(grad);

  Tensor dtable = empty({kMaxSeq, kCols}, dtype);
  ops().fill(dtable, 0.0f);
  ops().positional_backward(dy_t, dtable);
  EXPECT_TRUE(near_each(to_vec(dtable), grad, u, abs)) << "one call";
  ops().positional_backward(dy_t, dtable);
  EXPECT_TRUE(near_each(to_vec(dtable), scaled(grad, 2.0), 2 * u, 2 * abs)) << "two calls";

  // A pre-filled gradient is added to; rows past T are left as they were.
  const Vec prefill = rounded(random_vec(kMaxSeq * kCols, -4.0, 4.0, 316), dtype);
  Tensor dtable2 = from_vec(prefill, {kMaxSeq, kCols}, dtype);
  ops().positional_backward(dy_t, dtable2);
  const Vec got = to_vec(dtable2);
  EXPECT_TRUE(near_each(got, plus(prefill, grad), u, abs)) << "pre-filled";
  for (int64_t i = kSeq * kCols; i < kMaxSeq * kCols; ++i) ASSERT_EQ(got[i], prefill[i]);
}

INSTANTIATE_TEST_SUITE_P(TableDtypes, PositionalTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         dtype_param_name);

}  // namespace
}  // namespace zero::test
