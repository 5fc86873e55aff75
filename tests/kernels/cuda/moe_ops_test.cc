// CUDA mixture-of-experts ops (kernels/ops.h: the router's softmax, top-k
// and backward, the row gather and scatter, the weighted combine and its
// backward, the sigmoid gate) against the CPU backend.
//
// Tolerances: 1e-6 absolute + 1e-5 relative (expf against the CPU's exp, and
// sums in another order); the router's choices and the row copies exactly.
#include "core/strings.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

class MoeOpsTest : public CudaVsCpuTest {};


TEST_F(MoeOpsTest, RouterForwardAndBackwardMatchCpu) {
  for (const bool renormalize : {true, false}) {
    SCOPED_TRACE(renormalize ? "renormalised" : "not renormalised");
    const int64_t n = 257, e = 8, k = 3;
    Mirrored logits = random(Shape{n, e}, DType::kF32, 11, -3.0f, 3.0f);
    Mirrored probs = random(Shape{n, e}, DType::kF32, 12), weights = random(Shape{n, k}, DType::kF32, 13);
    Mirrored lse = random(Shape{n}, DType::kF32, 14);
    Mirrored indices = mirrored_ids(std::vector<int32_t>(n * k, 0), Shape{n, k});
    cpu_.ops().moe_router_forward(logits.cpu, k, renormalize, probs.cpu, indices.cpu, weights.cpu, lse.cpu);
    gpu_->ops().moe_router_forward(logits.gpu, k, renormalize, probs.gpu, indices.gpu, weights.gpu, lse.gpu);
    expect_close(values(probs.gpu), values(probs.cpu), 1e-6f, 1e-5f, "probs");
    expect_exact(values(indices.gpu), values(indices.cpu), "indices");
    expect_close(values(weights.gpu), values(weights.cpu), 1e-6f, 1e-5f, "weights");
    expect_close(values(lse.gpu), values(lse.cpu), 1e-6f, 1e-5f, "lse");

    Mirrored dweights = random(Shape{n, k}, DType::kF32, 15), extra = random(Shape{e}, DType::kF32, 16);
    Mirrored dlogits = random(Shape{n, e}, DType::kF32, 17);
    gpu_->copy(probs.gpu, probs.cpu);
    gpu_->copy(lse.gpu, lse.cpu);
    cpu_.ops().moe_router_backward(probs.cpu, indices.cpu, dweights.cpu, renormalize, extra.cpu, 0.01f, lse.cpu,
                                   dlogits.cpu);
    gpu_->ops().moe_router_backward(probs.gpu, indices.gpu, dweights.gpu, renormalize, extra.gpu, 0.01f, lse.gpu,
                                    dlogits.gpu);
    expect_close(values(dlogits.gpu), values(dlogits.cpu), 1e-6f, 1e-5f, "dlogits");
  }
}

TEST_F(MoeOpsTest, DispatchAndCombineMatchCpu) {
  const int64_t n = 97, c = 70, k = 2;
  // Rows of one expert: distinct tokens, one padding row (-1), slots into [n, k].
  std::vector<int32_t> rows, slots;
  for (int32_t t = 0; t < n; t += 3) rows.push_back(t), slots.push_back(t * k + (t % 2));
  rows.push_back(-1), slots.push_back(-1);
  const int64_t m = static_cast<int64_t>(rows.size());
  Mirrored r = mirrored_ids(rows, Shape{m}), s = mirrored_ids(slots, Shape{m});
  Mirrored x = random(Shape{n, c}, DType::kF32, 21), out = random(Shape{m, c}, DType::kF32, 22);
  cpu_.ops().gather_rows(x.cpu, r.cpu, out.cpu);
  gpu_->ops().gather_rows(x.gpu, r.gpu, out.gpu);
  expect_exact(values(out.gpu), values(out.cpu), "gather_rows");

  Mirrored dx = random(Shape{n, c}, DType::kF32, 23);
  cpu_.ops().scatter_add_rows(out.cpu, r.cpu, dx.cpu);
  gpu_->ops().scatter_add_rows(out.gpu, r.gpu, dx.gpu);
  expect_exact(values(dx.gpu), values(dx.cpu), "scatter_add_rows");

  Mirrored h = random(Shape{m, c}, DType::kF32, 24), w = random(Shape{n, k}, DType::kF32, 25);
  Mirrored y = random(Shape{n, c}, DType::kF32, 26);
  cpu_.ops().moe_combine(h.cpu, r.cpu, s.cpu, w.cpu, y.cpu);
  gpu_->ops().moe_combine(h.gpu, r.gpu, s.gpu, w.gpu, y.gpu);
  expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-6f, "moe_combine");

  Mirrored dy = random(Shape{n, c}, DType::kF32, 27), dh = random(Shape{m, c}, DType::kF32, 28);
  Mirrored dw = random(Shape{n, k}, DType::kF32, 29);
  cpu_.ops().moe_combine_backward(dy.cpu, h.cpu, r.cpu, s.cpu, w.cpu, dh.cpu, dw.cpu);
  gpu_->ops().moe_combine_backward(dy.gpu, h.gpu, r.gpu, s.gpu, w.gpu, dh.gpu, dw.gpu);
  expect_exact(values(dh.gpu), values(dh.cpu), "dh");
  expect_close(values(dw.gpu), values(dw.cpu), 1e-6f, 1e-5f, "dweights");
}

TEST_F(MoeOpsTest, SigmoidGateMatchesCpu) {
  const int64_t n = 131, c = 50;
  Mirrored g = random(Shape{n, 1}, DType::kF32, 31, -4.0f, 4.0f), x = random(Shape{n, c}, DType::kF32, 32);
  Mirrored y = random(Shape{n, c}, DType::kF32, 33);
  cpu_.ops().sigmoid_gate_forward(g.cpu, x.cpu, y.cpu);
  gpu_->ops().sigmoid_gate_forward(g.gpu, x.gpu, y.gpu);
  expect_close(values(y.gpu), values(y.cpu), 1e-6f, 1e-5f, "y");
  Mirrored dy = random(Shape{n, c}, DType::kF32, 34), dg = random(Shape{n, 1}, DType::kF32, 35);
  Mirrored dx = random(Shape{n, c}, DType::kF32, 36);
  cpu_.ops().sigmoid_gate_backward(g.cpu, x.cpu, dy.cpu, dg.cpu, dx.cpu);
  gpu_->ops().sigmoid_gate_backward(g.gpu, x.gpu, dy.gpu, dg.gpu, dx.gpu);
  expect_close(values(dx.gpu), values(dx.cpu), 1e-6f, 1e-5f, "dx");
  expect_close(values(dg.gpu), values(dg.cpu), 1e-6f, 1e-5f, "dg");
}

}  // namespace
}  // namespace zero::cuda_test
