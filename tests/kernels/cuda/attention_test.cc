// CUDA attention glue against the CPU backend: causal softmax forward and
// backward (also in place), split_qkv / merge_qkv / transpose12.
//
// Tolerances: the shuffles move bits, so they must be exact. Softmax: 1e-6
// absolute + 1e-5 relative (the CPU uses its own polynomial exp, CUDA expf;
// both a few ulp); the masked upper triangle must be exactly 0.
#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

class AttentionTest : public CudaVsCpuTest {};

TEST_F(AttentionTest, CausalSoftmaxMatchesCpu) {
  for (int64_t seq : {int64_t{1}, int64_t{33}, int64_t{130}}) {
    SCOPED_TRACE(cat("T = ", seq));
    const int64_t bh = 6;
    Mirrored scores = random(Shape{bh, seq, seq}, DType::kF32, 21, -8.0f, 8.0f);
    Mirrored probs = random(Shape{bh, seq, seq}, DType::kF32, 22);
    cpu_.ops().causal_softmax_forward(scores.cpu, probs.cpu);
    gpu_->ops().causal_softmax_forward(scores.gpu, probs.gpu);
    const std::vector<float> p = values(probs.gpu);
    expect_close(p, values(probs.cpu), 1e-6f, 1e-5f, "probs");
    for (int64_t r = 0; r < bh * seq; ++r) {
      for (int64_t j = r % seq + 1; j < seq; ++j) {
        ASSERT_EQ(p[static_cast<size_t>(r * seq + j)], 0.0f) << "row " << r << " col " << j;
      }
    }

    Mirrored dprobs = random(Shape{bh, seq, seq}, DType::kF32, 23);
    Mirrored dscores = random(Shape{bh, seq, seq}, DType::kF32, 24);
    cpu_.ops().causal_softmax_backward(probs.cpu, dprobs.cpu, dscores.cpu);
    gpu_->copy(probs.gpu, probs.cpu);  // same probabilities on both sides
    gpu_->ops().causal_softmax_backward(probs.gpu, dprobs.gpu, dscores.gpu);
    expect_close(values(dscores.gpu), values(dscores.cpu), 1e-6f, 1e-5f, "dscores");
  }
}

TEST_F(AttentionTest, CausalSoftmaxInPlaceMatchesOutOfPlace) {
  const int64_t bh = 4, seq = 77;
  Mirrored scores = random(Shape{bh, seq, seq}, DType::kF32, 31, -4.0f, 4.0f);
  Mirrored probs = random(Shape{bh, seq, seq}, DType::kF32, 32);
  gpu_->ops().causal_softmax_forward(scores.gpu, probs.gpu);
  gpu_->ops().causal_softmax_forward(scores.gpu, scores.gpu);
  expect_exact(values(scores.gpu), values(probs.gpu), "in-place probs");

  Mirrored dprobs = random(Shape{bh, seq, seq}, DType::kF32, 33);
  Mirrored dscores = random(Shape{bh, seq, seq}, DType::kF32, 34);
  gpu_->ops().causal_softmax_backward(probs.gpu, dprobs.gpu, dscores.gpu);
  gpu_->ops().causal_softmax_backward(probs.gpu, dprobs.gpu, dprobs.gpu);
  expect_exact(values(dprobs.gpu), values(dscores.gpu), "in-place dscores");
}

TEST_F(AttentionTest, QkvShufflesAreExact) {
  const int64_t b = 2, t = 11, h = 3, d = 40;
  Mirrored qkv = random(Shape{b, t, 3 * h * d}, DType::kF32, 41);
  Mirrored q = random(Shape{b, h, t, d}, DType::kF32, 42);
  Mirrored k = random(Shape{b, h, t, d}, DType::kF32, 43);
  Mirrored v = random(Shape{b, h, t, d}, DType::kF32, 44);
  cpu_.ops().split_qkv(qkv.cpu, q.cpu, k.cpu, v.cpu);
  gpu_->ops().split_qkv(qkv.gpu, q.gpu, k.gpu, v.gpu);
  expect_exact(values(q.gpu), values(q.cpu), "q");
  expect_exact(values(k.gpu), values(k.cpu), "k");
  expect_exact(values(v.gpu), values(v.cpu), "v");

  Mirrored dqkv = random(Shape{b, t, 3 * h * d}, DType::kF32, 45);
  cpu_.ops().merge_qkv(q.cpu, k.cpu, v.cpu, dqkv.cpu);
  gpu_->ops().merge_qkv(q.gpu, k.gpu, v.gpu, dqkv.gpu);
  expect_exact(values(dqkv.gpu), values(dqkv.cpu), "merged");
  expect_exact(values(dqkv.gpu), values(qkv.cpu), "merge undoes split");
}

TEST_F(AttentionTest, Transpose12IsExact) {
  for (int64_t d : {int64_t{1}, int64_t{64}, int64_t{70}}) {
    SCOPED_TRACE(cat("D = ", d));
    const int64_t a = 2, b = 5, c = 9;
    Mirrored src = random(Shape{a, b, c, d}, DType::kF32, 51);
    Mirrored dst = random(Shape{a, c, b, d}, DType::kF32, 52);
    Mirrored back = random(Shape{a, b, c, d}, DType::kF32, 53);
    cpu_.ops().transpose12(src.cpu, dst.cpu);
    gpu_->ops().transpose12(src.gpu, dst.gpu);
    expect_exact(values(dst.gpu), values(dst.cpu), "transposed");
    gpu_->ops().transpose12(dst.gpu, back.gpu);
    expect_exact(values(back.gpu), values(src.cpu), "transposed twice");
  }
}

}  // namespace
}  // namespace zero::cuda_test
