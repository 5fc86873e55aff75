// CUDA RMSNorm (and Gemma's (1 + gamma) form), rotary embeddings, SwiGLU
// and Gemma's GeGLU against the CPU backend.
//
// Tolerances (fp32 paths: 1e-5 relative, plus a small absolute term for
// elements that come out of a cancellation, e.g. x cos - x' sin near 0):
//  * RMSNorm y, rstd: 1e-6 absolute + 1e-5 relative (the mean of squares is
//    summed in a different order); dx: 1e-5 + 1e-5 relative (g - x k
//    cancels). dgamma is a sum over all rows: 1e-5 * rows absolute, plus one
//    ulp of a 16-bit destination.
//  * RoPE: 1e-6 + 1e-5 relative (sincosf and the CPU's sin/cos of the same fp32
//    angle are both within a few ulp). Inverse after forward: 1e-5 absolute.
//  * SwiGLU: 1e-6 + 1e-5 relative (expf against the CPU's exp); the aliased
//    backward is bit-identical to the out-of-place one on the device.
#include "core/strings.h"
#include "kernels/rope.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

float ulp_rel(DType t) { return t == DType::kBF16 ? 1.0f / 128.0f : (t == DType::kF16 ? 1.0f / 1024.0f : 0.0f); }

using GatedForward = void (Ops::*)(const Tensor&, const Tensor&, const Tensor&);
using GatedBackward = void (Ops::*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&);

class LlamaOpsTest : public CudaVsCpuTest {
 protected:
  void check_gated(GatedForward forward, GatedBackward backward, uint32_t seed);
};

TEST_F(LlamaOpsTest, RmsNormForwardAndBackwardMatchCpu) {
  // 7 rows: the direct column-sum path for dgamma; 301 rows: the chunked one.
  for (int64_t rows : {int64_t{7}, int64_t{301}}) {
    for (int64_t cols : {int64_t{64}, int64_t{1000}}) {
      for (DType param : {DType::kF32, DType::kBF16, DType::kF16}) {
        SCOPED_TRACE(cat(rows, "x", cols, " params ", dtype_name(param)));
        const uint32_t seed = static_cast<uint32_t>(rows * 31 + cols + static_cast<int>(param) * 7);
        const float eps = 1e-6f;
        Mirrored x = random(Shape{rows, cols}, DType::kF32, seed, -2.0f, 3.0f);
        Mirrored gamma = random(Shape{cols}, param, seed + 1, 0.5f, 1.5f);
        Mirrored y = random(Shape{rows, cols}, DType::kF32, seed + 2);
        Mirrored rstd = random(Shape{rows}, DType::kF32, seed + 3);
        cpu_.ops().rmsnorm_forward(x.cpu, gamma.cpu, eps, y.cpu, rstd.cpu);
        gpu_->ops().rmsnorm_forward(x.gpu, gamma.gpu, eps, y.gpu, rstd.gpu);
        expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-5f, "y");
        expect_close(values(rstd.gpu), values(rstd.cpu), 1e-6f, 1e-5f, "rstd");

        // Backward from the CPU's rstd on both sides, onto non-zero dgamma
        // (it must accumulate).
        Mirrored dy = random(Shape{rows, cols}, DType::kF32, seed + 4);
        Mirrored dx = random(Shape{rows, cols}, DType::kF32, seed + 5);
        Mirrored dgamma = random(Shape{cols}, param, seed + 6);
        gpu_->copy(rstd.gpu, rstd.cpu);
        cpu_.ops().rmsnorm_backward(dy.cpu, x.cpu, gamma.cpu, rstd.cpu, dx.cpu, dgamma.cpu);
        gpu_->ops().rmsnorm_backward(dy.gpu, x.gpu, gamma.gpu, rstd.gpu, dx.gpu, dgamma.gpu);
        expect_close(values(dx.gpu), values(dx.cpu), 1e-5f, 1e-5f, "dx");
        expect_close(values(dgamma.gpu), values(dgamma.cpu), 1e-5f * static_cast<float>(rows),
                     1e-5f + ulp_rel(param), "dgamma");
      }
    }
  }
}

TEST_F(LlamaOpsTest, RmsNormBackwardIsDeterministic) {
  const int64_t rows = 1001, cols = 96;
  Mirrored x = random(Shape{rows, cols}, DType::kF32, 1);
  Mirrored gamma = random(Shape{cols}, DType::kBF16, 2);
  Mirrored y = random(Shape{rows, cols}, DType::kF32, 3);
  Mirrored rstd = random(Shape{rows}, DType::kF32, 4);
  Mirrored dy = random(Shape{rows, cols}, DType::kF32, 5);
  Mirrored dx = random(Shape{rows, cols}, DType::kF32, 6);
  gpu_->ops().rmsnorm_forward(x.gpu, gamma.gpu, 1e-5f, y.gpu, rstd.gpu);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Mirrored dgamma = mirrored(std::vector<float>(cols, 0.0f), Shape{cols}, DType::kF32);
    gpu_->ops().rmsnorm_backward(dy.gpu, x.gpu, gamma.gpu, rstd.gpu, dx.gpu, dgamma.gpu);
    std::vector<float> got = values(dgamma.gpu);
    const std::vector<float> d = values(dx.gpu);
    got.insert(got.end(), d.begin(), d.end());
    if (run == 0) first = got;
    else expect_exact(got, first, cat("run ", run));
  }
}

TEST_F(LlamaOpsTest, RopeMatchesCpuAndInverseUndoesIt) {
  RopeScaling llama3;
  llama3.type = "llama3";
  llama3.factor = 8.0;
  // B * H * T = 21 rows: odd, and not a multiple of the block size.
  const int64_t batch = 1, heads = 3, seq = 7;
  for (int64_t dim : {int64_t{64}, int64_t{128}}) {
    for (const RopeScaling& scaling : {RopeScaling{}, llama3}) {
      absl::StatusOr<RopeFreqs> freqs = rope_frequencies(dim, 500000.0, scaling);
      ASSERT_TRUE(freqs.ok()) << freqs.status().ToString();
      for (int64_t first : {int64_t{0}, int64_t{37}, int64_t{8190}}) {
        SCOPED_TRACE(cat("D ", dim, " scaling '", scaling.type, "' first_position ", first));
        const Shape shape{batch, heads, seq, dim};
        const uint32_t seed = static_cast<uint32_t>(dim * 13 + first);
        Mirrored x = random(shape, DType::kF32, seed, -2.0f, 2.0f);
        Mirrored y = random(shape, DType::kF32, seed + 1);
        const std::vector<float> x0 = values(x.cpu);

        cpu_.ops().rope(x.cpu, y.cpu, *freqs, first, /*inverse=*/false);
        gpu_->ops().rope(x.gpu, y.gpu, *freqs, first, /*inverse=*/false);
        expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-5f, "rope");

        // The inverse out of place against the CPU's.
        Mirrored back = random(shape, DType::kF32, seed + 2);
        gpu_->copy(y.gpu, y.cpu);
        cpu_.ops().rope(y.cpu, back.cpu, *freqs, first, /*inverse=*/true);
        gpu_->ops().rope(y.gpu, back.gpu, *freqs, first, /*inverse=*/true);
        expect_close(values(back.gpu), values(back.cpu), 1e-6f, 1e-5f, "inverse rope");

        // In place (y aliasing x): forward then inverse gives x back.
        gpu_->ops().rope(x.gpu, x.gpu, *freqs, first, /*inverse=*/false);
        expect_close(values(x.gpu), values(y.cpu), 1e-6f, 1e-5f, "rope in place");
        gpu_->ops().rope(x.gpu, x.gpu, *freqs, first, /*inverse=*/true);
        expect_close(values(x.gpu), x0, 1e-5f, 0.0f, "inverse of rope");
      }
    }
  }
}

TEST_F(LlamaOpsTest, RopeRowsOfEveryHeadTakeTheirPosition) {
  // Two batches and heads of the same x row vector at every t: the rotated row
  // depends only on t, never on b or h.
  const int64_t batch = 2, heads = 2, seq = 5, dim = 64;
  absl::StatusOr<RopeFreqs> freqs = rope_frequencies(dim, 10000.0, RopeScaling{});
  ASSERT_TRUE(freqs.ok()) << freqs.status().ToString();
  const std::vector<float> row = uniform_values(dim, 77);
  std::vector<float> all;
  for (int64_t r = 0; r < batch * heads * seq; ++r) all.insert(all.end(), row.begin(), row.end());
  const Shape shape{batch, heads, seq, dim};
  Mirrored x = mirrored(all, shape, DType::kF32);
  gpu_->ops().rope(x.gpu, x.gpu, *freqs, 3, false);
  const std::vector<float> got = values(x.gpu);
  for (int64_t bh = 1; bh < batch * heads; ++bh) {
    const std::vector<float> head0(got.begin(), got.begin() + seq * dim);
    const std::vector<float> other(got.begin() + bh * seq * dim, got.begin() + (bh + 1) * seq * dim);
    expect_exact(other, head0, cat("head ", bh));
  }
  cpu_.ops().rope(x.cpu, x.cpu, *freqs, 3, false);
  expect_close(got, values(x.cpu), 1e-6f, 1e-5f, "rope");
}

// act(gate) * up forward and backward against the CPU's, and the backward
// writing dgate and dup over gate and up (consumed) giving the same bits.
void LlamaOpsTest::check_gated(GatedForward forward, GatedBackward backward, uint32_t seed) {
  const Shape shape{int64_t{10007}};
  Mirrored gate = random(shape, DType::kF32, seed, -12.0f, 12.0f);
  Mirrored up = random(shape, DType::kF32, seed + 1, -2.0f, 2.0f);
  Mirrored h = random(shape, DType::kF32, seed + 2);
  (cpu_.ops().*forward)(gate.cpu, up.cpu, h.cpu);
  (gpu_->ops().*forward)(gate.gpu, up.gpu, h.gpu);
  expect_close(values(h.gpu), values(h.cpu), 1e-6f, 1e-5f, "h");

  Mirrored dh = random(shape, DType::kF32, seed + 3);
  Mirrored dgate = random(shape, DType::kF32, seed + 4);
  Mirrored dup = random(shape, DType::kF32, seed + 5);
  (cpu_.ops().*backward)(gate.cpu, up.cpu, dh.cpu, dgate.cpu, dup.cpu);
  (gpu_->ops().*backward)(gate.gpu, up.gpu, dh.gpu, dgate.gpu, dup.gpu);
  const std::vector<float> dgate_gpu = values(dgate.gpu), dup_gpu = values(dup.gpu);
  expect_close(dgate_gpu, values(dgate.cpu), 1e-6f, 1e-5f, "dgate");
  expect_close(dup_gpu, values(dup.cpu), 1e-6f, 1e-5f, "dup");

  (gpu_->ops().*backward)(gate.gpu, up.gpu, dh.gpu, gate.gpu, up.gpu);
  expect_exact(values(gate.gpu), dgate_gpu, "dgate aliasing gate");
  expect_exact(values(up.gpu), dup_gpu, "dup aliasing up");
}

TEST_F(LlamaOpsTest, SwiGluMatchesCpuAndBackwardMayAliasItsInputs) {
  check_gated(&Ops::swiglu_forward, &Ops::swiglu_backward, 21);
}

// Gemma's GeGLU: tanhf against the CPU's exp-based tanh.
TEST_F(LlamaOpsTest, GeGluMatchesCpuAndBackwardMayAliasItsInputs) {
  check_gated(&Ops::geglu_forward, &Ops::geglu_backward, 31);
}

// A fused gate/up projection's rows in one launch (Ops::glu_rows_*), both
// gates, the backward in place over gate_up as the MLP runs it.
TEST_F(LlamaOpsTest, GluRowsMatchCpuInOneLaunch) {
  const int64_t rows = 37, f = 53;
  for (const Ops::Glu kind : {Ops::Glu::kSwiGlu, Ops::Glu::kGeGlu}) {
    SCOPED_TRACE(kind == Ops::Glu::kSwiGlu ? "SwiGLU" : "GeGLU");
    Mirrored gate_up = random(Shape{rows, 2 * f}, DType::kF32, 61, -4.0f, 4.0f);
    Mirrored h = random(Shape{rows, f}, DType::kF32, 62);
    cpu_.ops().glu_rows_forward(kind, gate_up.cpu, h.cpu);
    gpu_->ops().glu_rows_forward(kind, gate_up.gpu, h.gpu);
    expect_close(values(h.gpu), values(h.cpu), 1e-6f, 1e-5f, "h");
    Mirrored dh = random(Shape{rows, f}, DType::kF32, 63);
    cpu_.ops().glu_rows_backward(kind, gate_up.cpu, dh.cpu, gate_up.cpu);  // in place, as the MLP's rule
    gpu_->ops().glu_rows_backward(kind, gate_up.gpu, dh.gpu, gate_up.gpu);
    expect_close(values(gate_up.gpu), values(gate_up.cpu), 1e-6f, 1e-5f, "dgate_up");
  }
}

// Logit soft-capping: tanhf against the CPU's exp-based tanh.
TEST_F(LlamaOpsTest, SoftcapMatchesCpu) {
  const Shape shape{int64_t{10007}};
  Mirrored x = random(shape, DType::kF32, 51, -40.0f, 40.0f);
  Mirrored y = random(shape, DType::kF32, 52);
  cpu_.ops().softcap_forward(x.cpu, 5.0f, y.cpu);
  gpu_->ops().softcap_forward(x.gpu, 5.0f, y.gpu);
  expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-5f, "y");
  Mirrored dy = random(shape, DType::kF32, 53);
  Mirrored dx = random(shape, DType::kF32, 54);
  gpu_->copy(y.gpu, y.cpu);
  cpu_.ops().softcap_backward(y.cpu, dy.cpu, 5.0f, dx.cpu);
  gpu_->ops().softcap_backward(y.gpu, dy.gpu, 5.0f, dx.gpu);
  expect_close(values(dx.gpu), values(dx.cpu), 1e-6f, 1e-5f, "dx");
}

// Gemma's RMSNorm, y = x rstd (1 + gamma), forward and backward.
TEST_F(LlamaOpsTest, RmsNormUnitOffsetMatchesCpu) {
  const int64_t rows = 301, cols = 96;
  for (DType param : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(param));
    Mirrored x = random(Shape{rows, cols}, DType::kF32, 41, -2.0f, 3.0f);
    Mirrored gamma = random(Shape{cols}, param, 42, -0.5f, 0.5f);
    Mirrored y = random(Shape{rows, cols}, DType::kF32, 43);
    Mirrored rstd = random(Shape{rows}, DType::kF32, 44);
    cpu_.ops().rmsnorm_forward(x.cpu, gamma.cpu, 1e-6f, y.cpu, rstd.cpu, true);
    gpu_->ops().rmsnorm_forward(x.gpu, gamma.gpu, 1e-6f, y.gpu, rstd.gpu, true);
    expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-5f, "y");
    Mirrored dy = random(Shape{rows, cols}, DType::kF32, 45);
    Mirrored dx = random(Shape{rows, cols}, DType::kF32, 46);
    Mirrored dgamma = random(Shape{cols}, param, 47);
    gpu_->copy(rstd.gpu, rstd.cpu);
    cpu_.ops().rmsnorm_backward(dy.cpu, x.cpu, gamma.cpu, rstd.cpu, dx.cpu, dgamma.cpu, true);
    gpu_->ops().rmsnorm_backward(dy.gpu, x.gpu, gamma.gpu, rstd.gpu, dx.gpu, dgamma.gpu, true);
    expect_close(values(dx.gpu), values(dx.cpu), 1e-5f, 1e-5f, "dx");
    expect_close(values(dgamma.gpu), values(dgamma.cpu), 1e-5f * static_cast<float>(rows), 1e-5f + ulp_rel(param),
                 "dgamma");
  }
}

}  // namespace
}  // namespace zero::cuda_test
