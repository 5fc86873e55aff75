// CUDA layer norm and GELU against the CPU backend (oneDNN).
//
// Tolerances: y, dx: 1e-5 absolute + 1e-4 relative (different reduction
// orders over a row of up to 1000 elements); mean 1e-6 + 1e-5 relative, var
// 1e-5 relative. dgamma / dbeta are sums over all rows: 1e-5 * rows absolute,
// plus one ulp of a 16-bit destination. GELU: 1e-6 absolute + 1e-5 relative
// (oneDNN and CUDA use different tanh implementations, both within a few ulp).
#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

float ulp_rel(DType t) { return t == DType::kBF16 ? 1.0f / 128.0f : (t == DType::kF16 ? 1.0f / 1024.0f : 0.0f); }

class NormActivationTest : public CudaVsCpuTest {};

TEST_F(NormActivationTest, LayerNormForwardAndBackwardMatchCpu) {
  // 7 rows: the direct column-sum path; 300 rows: the chunked one.
  for (int64_t rows : {int64_t{7}, int64_t{300}}) {
    for (int64_t cols : {int64_t{64}, int64_t{1000}}) {
      for (DType param : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(cat(rows, "x", cols, " params ", dtype_name(param)));
        const uint32_t seed = static_cast<uint32_t>(rows * 31 + cols + (param == DType::kF32 ? 0 : 7));
        const float eps = 1e-5f;
        Mirrored x = random(Shape{rows, cols}, DType::kF32, seed, -2.0f, 3.0f);
        Mirrored gamma = random(Shape{cols}, param, seed + 1, 0.5f, 1.5f);
        Mirrored beta = random(Shape{cols}, param, seed + 2);
        Mirrored y = random(Shape{rows, cols}, DType::kF32, seed + 3);
        Mirrored mean = random(Shape{rows}, DType::kF32, seed + 4);
        Mirrored var = random(Shape{rows}, DType::kF32, seed + 5);
        cpu_.ops().layernorm_forward(x.cpu, gamma.cpu, beta.cpu, eps, y.cpu, mean.cpu, var.cpu);
        gpu_->ops().layernorm_forward(x.gpu, gamma.gpu, beta.gpu, eps, y.gpu, mean.gpu, var.gpu);
        expect_close(values(y.gpu), values(y.cpu), 1e-5f, 1e-4f, "y");
        expect_close(values(mean.gpu), values(mean.cpu), 1e-6f, 1e-5f, "mean");
        expect_close(values(var.gpu), values(var.cpu), 0.0f, 1e-5f, "var");

        // Backward from the CPU's saved statistics on both sides, onto
        // non-zero parameter gradients (they must accumulate).
        Mirrored dy = random(Shape{rows, cols}, DType::kF32, seed + 6);
        Mirrored dx = random(Shape{rows, cols}, DType::kF32, seed + 7);
        Mirrored dgamma = random(Shape{cols}, param, seed + 8);
        Mirrored dbeta = random(Shape{cols}, param, seed + 9);
        gpu_->copy(mean.gpu, mean.cpu);
        gpu_->copy(var.gpu, var.cpu);
        cpu_.ops().layernorm_backward(dy.cpu, x.cpu, gamma.cpu, mean.cpu, var.cpu, eps, dx.cpu,
                                      dgamma.cpu, dbeta.cpu);
        gpu_->ops().layernorm_backward(dy.gpu, x.gpu, gamma.gpu, mean.gpu, var.gpu, eps, dx.gpu,
                                       dgamma.gpu, dbeta.gpu);
        expect_close(values(dx.gpu), values(dx.cpu), 1e-5f, 1e-4f, "dx");
        const float sum_atol = 1e-5f * static_cast<float>(rows);
        expect_close(values(dgamma.gpu), values(dgamma.cpu), sum_atol, 1e-5f + ulp_rel(param),
                     "dgamma");
        expect_close(values(dbeta.gpu), values(dbeta.cpu), sum_atol, 1e-5f + ulp_rel(param),
                     "dbeta");
      }
    }
  }
}

TEST_F(NormActivationTest, LayerNormBackwardIsDeterministic) {
  const int64_t rows = 1000, cols = 96;
  Mirrored x = random(Shape{rows, cols}, DType::kF32, 1);
  Mirrored gamma = random(Shape{cols}, DType::kF32, 2);
  Mirrored beta = random(Shape{cols}, DType::kF32, 3);
  Mirrored y = random(Shape{rows, cols}, DType::kF32, 4);
  Mirrored mean = random(Shape{rows}, DType::kF32, 5);
  Mirrored var = random(Shape{rows}, DType::kF32, 6);
  Mirrored dy = random(Shape{rows, cols}, DType::kF32, 7);
  Mirrored dx = random(Shape{rows, cols}, DType::kF32, 8);
  gpu_->ops().layernorm_forward(x.gpu, gamma.gpu, beta.gpu, 1e-5f, y.gpu, mean.gpu, var.gpu);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Mirrored dgamma = mirrored(std::vector<float>(cols, 0.0f), Shape{cols}, DType::kF32);
    Mirrored dbeta = mirrored(std::vector<float>(cols, 0.0f), Shape{cols}, DType::kF32);
    gpu_->ops().layernorm_backward(dy.gpu, x.gpu, gamma.gpu, mean.gpu, var.gpu, 1e-5f, dx.gpu,
                                   dgamma.gpu, dbeta.gpu);
    std::vector<float> got = values(dgamma.gpu);
    const std::vector<float> db = values(dbeta.gpu);
    got.insert(got.end(), db.begin(), db.end());
    if (run == 0) first = got;
    else expect_exact(got, first, cat("run ", run));
  }
}

TEST_F(NormActivationTest, GeluForwardAndBackwardMatchCpu) {
  const int64_t n = 10007;
  Mirrored x = random(Shape{n}, DType::kF32, 11, -6.0f, 6.0f);
  Mirrored y = random(Shape{n}, DType::kF32, 12);
  Mirrored dy = random(Shape{n}, DType::kF32, 13);
  Mirrored dx = random(Shape{n}, DType::kF32, 14);
  cpu_.ops().gelu_forward(x.cpu, y.cpu);
  gpu_->ops().gelu_forward(x.gpu, y.gpu);
  expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-5f, "gelu y");
  cpu_.ops().gelu_backward(x.cpu, dy.cpu, dx.cpu);
  gpu_->ops().gelu_backward(x.gpu, dy.gpu, dx.gpu);
  expect_close(values(dx.gpu), values(dx.cpu), 1e-6f, 1e-5f, "gelu dx");
}

}  // namespace
}  // namespace zero::cuda_test
