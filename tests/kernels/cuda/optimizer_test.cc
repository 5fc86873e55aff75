// CUDA AdamW/Adam, SGD and Lion steps against the CPU backend, over three
// steps, every gradient dtype and every parameter-copy dtype (or none), with
// and without weight decay, bias correction, momentum, dampening and Nesterov.
//
// Tolerance: exact. optimizer.cu performs adamw_impl.h's (and lion_impl.h's)
// operations in the same order with explicit IEEE rounding (fma, division and
// square root correctly rounded on both sides), and the 16-bit copies round to
// nearest even, so master weights, moments and copies must be bit-identical.
#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

constexpr int64_t kNumel = 5003;

class OptimizerTest : public CudaVsCpuTest {
 protected:
  // Gradients of `dtype` for step s.
  Mirrored grad(DType dtype, int step) { return random(Shape{kNumel}, dtype, 200 + step, -0.1f, 0.1f); }
};

TEST_F(OptimizerTest, AdamWMatchesCpuExactly) {
  struct Mode {
    bool adamw_mode, bias_correction;
    float weight_decay, grad_scale;
  };
  const Mode modes[] = {{true, true, 0.01f, 1.0f}, {false, true, 0.01f, 0.5f},
                        {true, false, 0.0f, 1.0f}, {false, false, 0.1f, 2.0f}};
  const DType param_dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32};  // kI32: none
  for (const Mode& mode : modes) {
    for (DType grad_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType param_dtype : param_dtypes) {
        const bool with_copy = param_dtype != DType::kI32;
        SCOPED_TRACE(cat(mode.adamw_mode ? "adamw" : "adam", " wd ", mode.weight_decay, " bc ",
                         mode.bias_correction, " grad ", dtype_name(grad_dtype), " copy ",
                         with_copy ? dtype_name(param_dtype) : "none"));
        Mirrored master = random(Shape{kNumel}, DType::kF32, 1);
        Mirrored m = mirrored(std::vector<float>(kNumel, 0.0f), Shape{kNumel}, DType::kF32);
        Mirrored v = mirrored(std::vector<float>(kNumel, 0.0f), Shape{kNumel}, DType::kF32);
        Mirrored copy;
        if (with_copy) copy = random(Shape{kNumel}, param_dtype, 2);
        AdamWHyper h;
        h.lr = 3e-3f;
        h.adamw_mode = mode.adamw_mode;
        h.bias_correction = mode.bias_correction;
        h.weight_decay = mode.weight_decay;
        h.grad_scale = mode.grad_scale;
        for (int step = 1; step <= 3; ++step) {
          h.step = step;
          Mirrored g = grad(grad_dtype, step);
          cpu_.ops().adamw(master.cpu, g.cpu, m.cpu, v.cpu, copy.cpu, h);
          gpu_->ops().adamw(master.gpu, g.gpu, m.gpu, v.gpu, copy.gpu, h);
        }
        expect_exact(values(master.gpu), values(master.cpu), "master");
        expect_exact(values(m.gpu), values(m.cpu), "m");
        expect_exact(values(v.gpu), values(v.cpu), "v");
        if (with_copy) expect_exact(values(copy.gpu), values(copy.cpu), "param copy");
      }
    }
  }
}

TEST_F(OptimizerTest, SgdMatchesCpuExactly) {
  struct Mode {
    float momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Mode modes[] = {{0.0f, 0.0f, 0.0f, false}, {0.9f, 0.0f, 0.01f, false},
                        {0.9f, 0.1f, 0.0f, false}, {0.9f, 0.0f, 1e-4f, true}};
  for (const Mode& mode : modes) {
    for (DType grad_dtype : {DType::kF32, DType::kBF16}) {
      for (DType param_dtype : {DType::kBF16, DType::kI32}) {  // kI32: no copy
        const bool with_copy = param_dtype != DType::kI32;
        SCOPED_TRACE(cat("momentum ", mode.momentum, " dampening ", mode.dampening, " wd ",
                         mode.weight_decay, " nesterov ", mode.nesterov, " grad ",
                         dtype_name(grad_dtype), " copy ", with_copy ? dtype_name(param_dtype) : "none"));
        Mirrored master = random(Shape{kNumel}, DType::kF32, 3);
        Mirrored buf = random(Shape{kNumel}, DType::kF32, 4);  // overwritten on the first step
        Mirrored copy;
        if (with_copy) copy = random(Shape{kNumel}, param_dtype, 5);
        SgdHyper h;
        h.lr = 0.05f;
        h.momentum = mode.momentum;
        h.dampening = mode.dampening;
        h.weight_decay = mode.weight_decay;
        h.nesterov = mode.nesterov;
        h.grad_scale = 0.5f;
        for (int step = 1; step <= 3; ++step) {
          h.first_step = step == 1;
          Mirrored g = grad(grad_dtype, step);
          cpu_.ops().sgd(master.cpu, g.cpu, buf.cpu, copy.cpu, h);
          gpu_->ops().sgd(master.gpu, g.gpu, buf.gpu, copy.gpu, h);
        }
        expect_exact(values(master.gpu), values(master.cpu), "master");
        if (mode.momentum != 0.0f) expect_exact(values(buf.gpu), values(buf.cpu), "momentum");
        if (with_copy) expect_exact(values(copy.gpu), values(copy.cpu), "param copy");
      }
    }
  }
}

TEST_F(OptimizerTest, LionMatchesCpuExactly) {
  for (float weight_decay : {0.0f, 0.1f}) {
    for (DType grad_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType param_dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {  // kI32: no copy
        const bool with_copy = param_dtype != DType::kI32;
        SCOPED_TRACE(cat("lion wd ", weight_decay, " grad ", dtype_name(grad_dtype), " copy ",
                         with_copy ? dtype_name(param_dtype) : "none"));
        Mirrored master = random(Shape{kNumel}, DType::kF32, 6);
        Mirrored m = mirrored(std::vector<float>(kNumel, 0.0f), Shape{kNumel}, DType::kF32);
        Mirrored copy;
        if (with_copy) copy = random(Shape{kNumel}, param_dtype, 7);
        LionHyper h;
        h.lr = 1e-3f;
        h.weight_decay = weight_decay;
        h.grad_scale = 0.5f;
        for (int step = 1; step <= 3; ++step) {
          Mirrored g = grad(grad_dtype, step);
          cpu_.ops().lion(master.cpu, g.cpu, m.cpu, copy.cpu, h);
          gpu_->ops().lion(master.gpu, g.gpu, m.gpu, copy.gpu, h);
        }
        expect_exact(values(master.gpu), values(master.cpu), "master");
        expect_exact(values(m.gpu), values(m.cpu), "exp_avg");
        if (with_copy) expect_exact(values(copy.gpu), values(copy.cpu), "param copy");
      }
    }
  }
}

}  // namespace
}  // namespace zero::cuda_test
