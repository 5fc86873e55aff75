// CUDA matmul (cuBLAS) against the CPU backend's (oneDNN), over transposes,
// 2-D and batched 3-D shapes, operand / compute / output dtypes, alpha,
// accumulate and bias.
//
// Tolerance per element of C, with S = sum_k |a_ik| |b_kj| of the stored
// operands:
//   1e-5 * S                      accumulation order (fp32 accumulate, K <= 1024)
//   + 2^-10 * S                   fp16 compute from non-fp16 operands: the CPU
//                                 runs fp16 GEMMs in fp32 (see MatmulSpec), the
//                                 GPU rounds the operands to fp16
//   + one ulp of C's dtype * |c|  when C is 16-bit (near-equal fp32 results
//                                 may round to neighbouring values)
//   + 1e-6.
#include <cmath>
#include <string>

#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

struct GemmCase {
  DType a, b, compute, c;
};

const GemmCase kDtypeCases[] = {
    {DType::kF32, DType::kF32, DType::kF32, DType::kF32},
    {DType::kBF16, DType::kBF16, DType::kBF16, DType::kF32},
    {DType::kF32, DType::kF32, DType::kBF16, DType::kF32},   // operand casts
    {DType::kF32, DType::kBF16, DType::kBF16, DType::kBF16},  // C in the compute dtype
    {DType::kF16, DType::kF16, DType::kF16, DType::kF32},
    {DType::kF16, DType::kF16, DType::kF16, DType::kF16},
    {DType::kF32, DType::kF32, DType::kF16, DType::kF32},    // CPU fp32 vs GPU fp16 products
    {DType::kBF16, DType::kBF16, DType::kF32, DType::kF32},  // upcast to fp32
    {DType::kF32, DType::kF32, DType::kF32, DType::kBF16},   // fp32 staging, then cast
};

float ulp_rel(DType t) {
  switch (t) {
    case DType::kBF16: return 1.0f / 128.0f;
    case DType::kF16: return 1.0f / 1024.0f;
    default: return 0.0f;
  }
}

std::string spec_string(const GemmCase& g, bool ta, bool tb, bool acc, float alpha, bool bias) {
  return cat("A ", dtype_name(g.a), ta ? "^T" : "", " B ", dtype_name(g.b), tb ? "^T" : "",
             " compute ", dtype_name(g.compute), " C ", dtype_name(g.c), acc ? " +=" : " =",
             " alpha ", alpha, bias ? " +bias" : "");
}

class GemmTest : public CudaVsCpuTest {
 protected:
  // One GEMM on both backends; batch 0 means 2-D.
  void check(int64_t batch, int64_t m, int64_t n, int64_t k, const GemmCase& g, bool ta, bool tb,
             bool accumulate, float alpha, bool with_bias, uint32_t seed) {
    const std::string what = cat("[", batch, "] ", m, "x", n, "x", k, " ",
                                 spec_string(g, ta, tb, accumulate, alpha, with_bias));
    SCOPED_TRACE(what);
    auto shape = [&](int64_t r, int64_t c) {
      return batch == 0 ? Shape{r, c} : Shape{batch, r, c};
    };
    Mirrored a = random(ta ? shape(k, m) : shape(m, k), g.a, seed);
    Mirrored b = random(tb ? shape(n, k) : shape(k, n), g.b, seed + 1);
    Mirrored c = random(shape(m, n), g.c, seed + 2);
    Mirrored bias;
    if (with_bias) bias = random(Shape{n}, DType::kBF16, seed + 3);
    MatmulSpec spec;
    spec.trans_a = ta;
    spec.trans_b = tb;
    spec.alpha = alpha;
    spec.accumulate = accumulate;
    spec.compute = g.compute;
    cpu_.ops().matmul(a.cpu, b.cpu, c.cpu, spec, bias.cpu);
    gpu_->ops().matmul(a.gpu, b.gpu, c.gpu, spec, bias.gpu);

    const std::vector<float> av = values(a.cpu), bv = values(b.cpu);
    const std::vector<float> expected = values(c.cpu), actual = values(c.gpu);
    const int64_t batches = batch == 0 ? 1 : batch;
    float rel = 1e-5f;
    if (g.compute == DType::kF16 && (g.a != DType::kF16 || g.b != DType::kF16)) rel += 1.0f / 1024.0f;
    int64_t failures = 0;
    for (int64_t p = 0; p < batches; ++p) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (int64_t q = 0; q < k; ++q) {
            const float x = ta ? av[(p * k + q) * m + i] : av[(p * m + i) * k + q];
            const float y = tb ? bv[(p * n + j) * k + q] : bv[(p * k + q) * n + j];
            s += std::fabs(static_cast<double>(x) * y);
          }
          const size_t idx = static_cast<size_t>((p * m + i) * n + j);
          const double tol = rel * std::fabs(alpha) * s + ulp_rel(g.c) * std::fabs(expected[idx]) + 1e-6;
          if (!(std::fabs(static_cast<double>(actual[idx]) - expected[idx]) <= tol) &&
              failures++ < 5) {
            ADD_FAILURE() << "C[" << p << ", " << i << ", " << j << "]: cuda " << actual[idx]
                          << " vs cpu " << expected[idx] << " (tolerance " << tol << ")";
          }
        }
      }
    }
    EXPECT_EQ(failures, 0);
  }
};

TEST_F(GemmTest, EveryDtypeAndTransposeMatchesCpu) {
  uint32_t seed = 1;
  for (const GemmCase& g : kDtypeCases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      check(0, 37, 29, 64, g, ta, tb, false, 1.0f, false, seed += 4);
      check(3, 17, 24, 40, g, ta, tb, false, 1.0f, false, seed += 4);
    }
  }
}

TEST_F(GemmTest, AlphaAccumulateAndBiasMatchCpu) {
  uint32_t seed = 1000;
  for (const GemmCase& g : kDtypeCases) {
    for (bool accumulate : {false, true}) {
      check(0, 33, 20, 48, g, false, true, accumulate, 0.5f, false, seed += 4);
      check(0, 33, 20, 48, g, true, false, accumulate, 1.0f, true, seed += 4);
      check(2, 9, 31, 16, g, false, false, accumulate, 1.0f, true, seed += 4);
    }
  }
}

TEST_F(GemmTest, LongReductionMatchesCpu) {
  // K = 1024 lets cuBLAS choose split-K kernels; their partial sums must stay fp32.
  check(0, 64, 48, 1024, kDtypeCases[0], false, false, false, 1.0f, false, 77);
  check(0, 64, 48, 1024, kDtypeCases[1], false, true, true, 1.0f, false, 78);
  check(4, 32, 32, 1024, kDtypeCases[5], true, false, false, 1.0f, false, 79);
}

TEST_F(GemmTest, RepeatedRunsAreBitIdentical) {
  Mirrored a = random(Shape{128, 256}, DType::kBF16, 5);
  Mirrored b = random(Shape{256, 96}, DType::kBF16, 6);
  Mirrored c1 = random(Shape{128, 96}, DType::kF32, 7);
  Mirrored c2 = random(Shape{128, 96}, DType::kF32, 8);
  MatmulSpec spec;
  spec.compute = DType::kBF16;
  gpu_->ops().matmul(a.gpu, b.gpu, c1.gpu, spec);
  gpu_->ops().matmul(a.gpu, b.gpu, c2.gpu, spec);
  expect_exact(values(c1.gpu), values(c2.gpu), "second run");
}

}  // namespace
}  // namespace zero::cuda_test
