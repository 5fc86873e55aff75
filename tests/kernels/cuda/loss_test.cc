// CUDA fused softmax cross-entropy against the CPU backend, with ignored rows
// (negative targets), a vocabulary that is not a multiple of the block size
// and logits far from zero.
//
// Tolerances: losses 1e-5 absolute + 1e-5 relative; gradients 1e-7 absolute
// + 1e-5 relative of grad_scale * softmax (CPU polynomial exp vs CUDA expf,
// different summation orders). Ignored rows must be exactly 0.
//
// The vocabulary-parallel phases (row_max, cross_entropy_slice_exp and
// _finish) on a slice of columns [first, first + w) against the CPU's: the
// maxima exactly, sums, target logits, losses and gradients to the same
// tolerances.
#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

class LossTest : public CudaVsCpuTest {};

TEST_F(LossTest, CrossEntropyMatchesCpu) {
  for (int64_t vocab : {int64_t{10}, int64_t{1000}, int64_t{50257}}) {
    SCOPED_TRACE(cat("vocab ", vocab));
    const int64_t n = 37;
    const float grad_scale = 1.0f / static_cast<float>(n);
    std::vector<int32_t> targets(static_cast<size_t>(n));
    const std::vector<float> u = uniform_values(n, 101, 0.0f, 1.0f);
    for (size_t i = 0; i < targets.size(); ++i) {
      targets[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(u[i] * static_cast<float>(vocab - 1));
    }
    targets[0] = static_cast<int32_t>(vocab - 1);
    Mirrored t = mirrored_ids(targets, Shape{n});
    Mirrored logits = random(Shape{n, vocab}, DType::kF32, 102, 20.0f, 40.0f);
    Mirrored losses = random(Shape{n}, DType::kF32, 103);
    cpu_.ops().cross_entropy(logits.cpu, t.cpu, grad_scale, losses.cpu);
    gpu_->ops().cross_entropy(logits.gpu, t.gpu, grad_scale, losses.gpu);
    expect_close(values(losses.gpu), values(losses.cpu), 1e-5f, 1e-5f, "losses");
    const std::vector<float> grad = values(logits.gpu);
    expect_close(grad, values(logits.cpu), 1e-7f, 1e-5f, "dlogits");
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i] >= 0) continue;
      for (int64_t j = 0; j < vocab; ++j) {
        ASSERT_EQ(grad[i * static_cast<size_t>(vocab) + static_cast<size_t>(j)], 0.0f)
            << "ignored row " << i;
      }
    }
  }
}

TEST_F(LossTest, VocabularySlicePhasesMatchCpu) {
  const int64_t n = 29, cols = 1234, first = 5000;
  const float grad_scale = 0.125f;
  std::vector<int32_t> targets(static_cast<size_t>(n));
  for (size_t i = 0; i < targets.size(); ++i) {
    // In the slice, outside it on either side, and ignored.
    targets[i] = i % 5 == 0 ? -1 : static_cast<int32_t>(first - 100 + static_cast<int64_t>(i) * 60);
  }
  Mirrored t = mirrored_ids(targets, Shape{n});
  Mirrored logits = random(Shape{n, cols}, DType::kF32, 111, -8.0f, 8.0f);
  Mirrored max = random(Shape{n}, DType::kF32, 112);
  Mirrored sums = random(Shape{n, 2}, DType::kF32, 113);
  Mirrored losses = random(Shape{n}, DType::kF32, 114);
  cpu_.ops().row_max(logits.cpu, max.cpu);
  gpu_->ops().row_max(logits.gpu, max.gpu);
  expect_exact(values(max.gpu), values(max.cpu), "row maxima");
  // As if another rank's slice held a larger maximum in half of the rows.
  std::vector<float> m = values(max.cpu);
  for (size_t i = 0; i < m.size(); i += 2) m[i] += 1.5f;
  Mirrored shifted = mirrored(m, Shape{n}, DType::kF32);
  cpu_.ops().cross_entropy_slice_exp(logits.cpu, t.cpu, first, shifted.cpu, sums.cpu);
  gpu_->ops().cross_entropy_slice_exp(logits.gpu, t.gpu, first, shifted.gpu, sums.gpu);
  expect_close(values(sums.gpu), values(sums.cpu), 1e-5f, 1e-5f, "sums and target logits");
  cpu_.ops().cross_entropy_slice_finish(logits.cpu, t.cpu, first, shifted.cpu, sums.cpu, grad_scale, losses.cpu);
  gpu_->ops().cross_entropy_slice_finish(logits.gpu, t.gpu, first, shifted.gpu, sums.gpu, grad_scale, losses.gpu);
  expect_close(values(losses.gpu), values(losses.cpu), 1e-5f, 1e-5f, "losses");
  expect_close(values(logits.gpu), values(logits.cpu), 1e-7f, 1e-5f, "the slice of dlogits");
}

}  // namespace
}  // namespace zero::cuda_test
