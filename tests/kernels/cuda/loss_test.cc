// CUDA fused softmax cross-entropy against the CPU backend, with ignored rows
// (negative targets), a vocabulary that is not a multiple of the block size
// and logits far from zero.
//
// Tolerances: losses 1e-5 absolute + 1e-5 relative; gradients 1e-7 absolute
// + 1e-5 relative of grad_scale * softmax (CPU polynomial exp vs CUDA expf,
// different summation orders). Ignored rows must be exactly 0.
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

}  // namespace
}  // namespace zero::cuda_test
