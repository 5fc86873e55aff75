// Every recorded op's backward rule (graph/functional.h) on the CUDA backend:
// the rules are written once over the backends' ops, so each case of
// tests/graph/op_cases.h (the cases the CPU checks against central
// differences) runs forward and backward on CudaBackend and on CpuBackend
// from the same input, parameters and output gradient, and the output, dx
// and every parameter gradient must agree. Skipped without a GPU.
#include <gtest/gtest.h>

#include "tests/graph/op_cases.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

using autograd_cases::OpCase;

struct Pass {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
};

Pass run_case(const OpCase& op, Backend& backend) {
  autograd_cases::FnModule m("", op.body);
  op.params(m);
  testing::materialise_random(m, backend, 11);
  Context ctx(backend, DType::kF32);
  ctx.set_dropout_key(42, 7);
  const Tensor x = autograd_cases::upload(
      backend, autograd_cases::random_values(static_cast<size_t>(shape_numel(op.input)), 3), op.input);
  Pass out;
  const Tensor y = ctx.forward(m, x);
  out.y = download_fp32(backend, y);
  const std::vector<float> r = autograd_cases::random_values(static_cast<size_t>(y.numel()), 5);
  const Tensor dx = ctx.backward(m, autograd_cases::upload(backend, r, y.shape()));
  EXPECT_TRUE(ctx.take_status().ok()) << op.name;
  EXPECT_EQ(ctx.live_frames(), 0u) << op.name;
  if (dx.defined()) out.dx = download_fp32(backend, dx);
  for (Parameter* p : m.parameters()) out.grads.push_back(download_fp32(backend, p->grad));
  return out;
}

class AutogradRulesCudaTest : public CudaVsCpuTest, public ::testing::WithParamInterface<OpCase> {};

TEST_P(AutogradRulesCudaTest, ForwardAndBackwardMatchTheCpu) {
  const OpCase& op = GetParam();
  const Pass cpu = run_case(op, cpu_);
  const Pass gpu = run_case(op, *gpu_);
  // Different summation orders (cuBLAS, block reductions): a bound, not bits.
  expect_close(gpu.y, cpu.y, 1e-5f, 1e-4f, op.name + ": y");
  expect_close(gpu.dx, cpu.dx, 1e-5f, 1e-4f, op.name + ": dx");
  ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    expect_close(gpu.grads[i], cpu.grads[i], 1e-5f, 1e-4f, op.name + ": parameter " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, AutogradRulesCudaTest, ::testing::ValuesIn(autograd_cases::op_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace zero::cuda_test
