// The attention ops on the CPU: causal softmax forward/backward (our SIMD
// kernels), the layout shuffles split_qkv / merge_qkv / transpose12, and the
// whole attention core composed from them and batched GEMMs, against the
// double references.
//
// Tolerances:
//  * causal softmax forward, per element 1e-5 relative: simd_exp is a few ulp
//    accurate and each probability is one exp times 1/sum (sum of <= 37 fp32
//    terms), so the relative error per probability is ~1e-6. Masked entries
//    (column > row) must be exactly 0, and in-place (probs aliasing scores)
//    must give the same bits as out of place.
//  * softmax backward vs reference::numeric_vjp (central differences in
//    double, ~1e-9 accurate): 1e-4 relative to the max-norm.
//  * the layout ops only move floats: exact.
//  * attention composed from ops vs reference::attention: 1e-5 relative to the
//    max-norm (two fp32 GEMMs and the softmax above).
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

// Row lengths 1..37 give tail-only rows and rows of one or two full vectors
// plus a tail, for both the 16-lane and the 8-lane bodies.
constexpr int64_t kBH = 3, kT = 37;

using CausalSoftmaxTest = KernelTest;

TEST_F(CausalSoftmaxTest, ForwardMatchesReferenceAndMasks) {
  Vec scores = rounded(random_vec(kBH * kT * kT, -4.0, 4.0, 201), DType::kF32);
  // One row of ~1e4 scores: the max subtraction must keep it finite.
  for (int64_t j = 0; j < kT; ++j) scores[(kT + kT - 1) * kT + j] = 1e4 + 3.0 * (j % 5);
  Tensor s = from_vec(scores, {kBH, kT, kT});
  Tensor p = empty({kBH, kT, kT}, DType::kF32);
  ops().fill(p, 99.0f);  // masked entries must be written as 0
  ops().causal_softmax_forward(s, p);
  const Vec got = to_vec(p), want = ref::causal_softmax(scores, kBH, kT);

  EXPECT_TRUE(near_each(got, want, 1e-5, 0.0));
  for (int64_t r = 0; r < kBH * kT; ++r) {
    const int64_t t = r % kT;
    double sum = 0.0;
    for (int64_t j = 0; j < kT; ++j) {
      if (j > t) {
        ASSERT_EQ(got[r * kT + j], 0.0) << "row " << r << " col " << j;
      }
      sum += got[r * kT + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }

  // probs may alias scores: same bits in place.
  ops().causal_softmax_forward(s, s);
  EXPECT_TRUE(same_bits(s, p));
}

TEST_F(CausalSoftmaxTest, BackwardMatchesFiniteDifferences) {
  const Vec scores = rounded(random_vec(kBH * kT * kT, -3.0, 3.0, 202), DType::kF32);
  Vec dprobs = rounded(random_vec(kBH * kT * kT, -1.0, 1.0, 203), DType::kF32);
  Tensor p = empty({kBH, kT, kT}, DType::kF32);
  ops().causal_softmax_forward(from_vec(scores, {kBH, kT, kT}), p);
  Tensor dp = from_vec(dprobs, {kBH, kT, kT});
  Tensor ds = empty({kBH, kT, kT}, DType::kF32);
  ops().fill(ds, 99.0f);
  ops().causal_softmax_backward(p, dp, ds);

  // Masked columns do not take part in the forward, so their dprobs (arbitrary
  // here) must not matter and their dscores are 0.
  const Vec want = ref::numeric_vjp(
      [](const Vec& x) { return ref::causal_softmax(x, kBH, kT); }, scores, dprobs);
  const Vec got = to_vec(ds);
  EXPECT_TRUE(near_max_norm(got, want, 1e-4));
  for (int64_t r = 0; r < kBH * kT; ++r)
    for (int64_t j = r % kT + 1; j < kT; ++j) ASSERT_EQ(got[r * kT + j], 0.0) << r << "," << j;

  // dscores may alias dprobs.
  ops().causal_softmax_backward(p, dp, dp);
  EXPECT_TRUE(same_bits(dp, ds));
}

// ------------------------------------------------------------ layout shuffles

constexpr int64_t kB = 2, kSeq = 5, kHeads = 3, kHeadDim = 7, kC = kHeads * kHeadDim;

using AttentionLayoutTest = KernelTest;

TEST_F(AttentionLayoutTest, SplitQkvThenMergeQkvRoundTrips) {
  const Vec qkv = random_vec(kB * kSeq * 3 * kC, -1.0, 1.0, 211);
  Tensor qkv_t = from_vec(qkv, {kB, kSeq, 3 * kC});
  Tensor q = empty({kB, kHeads, kSeq, kHeadDim}, DType::kF32);
  Tensor k = empty({kB, kHeads, kSeq, kHeadDim}, DType::kF32);
  Tensor v = empty({kB, kHeads, kSeq, kHeadDim}, DType::kF32);
  ops().split_qkv(qkv_t, q, k, v);

  const float* parts[3] = {q.f32(), k.f32(), v.f32()};
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kSeq; ++t)
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t h = 0; h < kHeads; ++h)
          for (int64_t d = 0; d < kHeadDim; ++d)
            ASSERT_EQ(parts[part][((b * kHeads + h) * kSeq + t) * kHeadDim + d],
                      qkv_t.f32()[(b * kSeq + t) * 3 * kC + part * kC + h * kHeadDim + d])
                << "b=" << b << " t=" << t << " part=" << part << " h=" << h << " d=" << d;

  Tensor merged = empty({kB, kSeq, 3 * kC}, DType::kF32);
  ops().fill(merged, 0.0f);
  ops().merge_qkv(q, k, v, merged);
  EXPECT_TRUE(same_bits(merged, qkv_t));
}

// Grouped-query attention's fused projection: [B, T, (H + 2 G) D] -> q of H
// heads, k and v of G.
TEST_F(AttentionLayoutTest, SplitQkvOfFewerKeyValueHeadsRoundTrips) {
  constexpr int64_t kKv = 1, kRow = (kHeads + 2 * kKv) * kHeadDim;
  const Vec qkv = random_vec(kB * kSeq * kRow, -1.0, 1.0, 214);
  Tensor qkv_t = from_vec(qkv, {kB, kSeq, kRow});
  Tensor q = empty({kB, kHeads, kSeq, kHeadDim}, DType::kF32);
  Tensor k = empty({kB, kKv, kSeq, kHeadDim}, DType::kF32);
  Tensor v = empty({kB, kKv, kSeq, kHeadDim}, DType::kF32);
  ops().split_qkv(qkv_t, q, k, v);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kSeq; ++t)
      for (int64_t j = 0; j < kHeads + 2 * kKv; ++j)  // the token's j-th head of q, then k, then v
        for (int64_t d = 0; d < kHeadDim; ++d) {
          const Tensor& part = j < kHeads ? q : (j < kHeads + kKv ? k : v);
          const int64_t n = j < kHeads ? kHeads : kKv, h = j < kHeads ? j : (j - kHeads) % kKv;
          ASSERT_EQ(part.f32()[((b * n + h) * kSeq + t) * kHeadDim + d],
                    qkv_t.f32()[(b * kSeq + t) * kRow + j * kHeadDim + d])
              << "b=" << b << " t=" << t << " j=" << j << " d=" << d;
        }
  Tensor merged = empty({kB, kSeq, kRow}, DType::kF32);
  ops().fill(merged, 0.0f);
  ops().merge_qkv(q, k, v, merged);
  EXPECT_TRUE(same_bits(merged, qkv_t));
}

TEST_F(AttentionLayoutTest, Transpose12SwapsMiddleDimensions) {
  const Vec x = random_vec(kB * kHeads * kSeq * kHeadDim, -1.0, 1.0, 212);
  Tensor src = from_vec(x, {kB, kHeads, kSeq, kHeadDim});
  Tensor dst = empty({kB, kSeq, kHeads, kHeadDim}, DType::kF32);
  ops().transpose12(src, dst);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t t = 0; t < kSeq; ++t)
        for (int64_t d = 0; d < kHeadDim; ++d)
          ASSERT_EQ(dst.f32()[((b * kSeq + t) * kHeads + h) * kHeadDim + d],
                    src.f32()[((b * kHeads + h) * kSeq + t) * kHeadDim + d]);
  Tensor back = empty({kB, kHeads, kSeq, kHeadDim}, DType::kF32);
  ops().transpose12(dst, back);
  EXPECT_TRUE(same_bits(back, src));
}

// The attention core as a model runs it: split, Q K^T / sqrt(D), causal
// softmax, P V, back to [B, T, C].
TEST_F(AttentionLayoutTest, ComposedAttentionMatchesReference) {
  const Vec qkv = rounded(random_vec(kB * kSeq * 3 * kC, -1.0, 1.0, 213), DType::kF32);
  const Shape heads_shape{kB, kHeads, kSeq, kHeadDim};
  Tensor q = empty(heads_shape, DType::kF32), k = empty(heads_shape, DType::kF32),
         v = empty(heads_shape, DType::kF32);
  ops().split_qkv(from_vec(qkv, {kB, kSeq, 3 * kC}), q, k, v);
  const Shape per_head{kB * kHeads, kSeq, kHeadDim};
  Tensor scores = empty({kB * kHeads, kSeq, kSeq}, DType::kF32);
  ops().matmul(q.view(per_head), k.view(per_head), scores,
               {.trans_b = true, .alpha = static_cast<float>(1.0 / std::sqrt(double{kHeadDim}))});
  ops().causal_softmax_forward(scores, scores);
  Tensor y_heads = empty(per_head, DType::kF32);
  ops().matmul(scores, v.view(per_head), y_heads, {});
  Tensor y = empty({kB, kSeq, kHeads, kHeadDim}, DType::kF32);
  ops().transpose12(y_heads.view(heads_shape), y);
  EXPECT_TRUE(near_max_norm(to_vec(y), ref::attention(qkv, kB, kSeq, kHeads, kHeadDim), 1e-5));
}

}  // namespace
}  // namespace zero::test
