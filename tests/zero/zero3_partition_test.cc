// Stage-3 partitioning checked by hand, after DeepSpeed's
// TestZero3ParamPartitioningBase: on 2 ranks, a model of three 3x5 weights
// (15 elements: rank 0 holds elements 0-7, rank 1 elements 8-14 and one
// padding element) whose chunks are set to (i + 1)(1 + rank). The forward
// sums the three linear maps of x; with softmax cross-entropy over 3 classes
// the full gradient of every weight is dW = dlogits^T x, computed here in
// double from the formula, and each rank's gradient chunk must equal its
// slice of that (rank 1's padding element 0). Without a step in between,
// gradients accumulate: after a second backward each chunk is 2x. After the
// step every non-persistent parameter is released and the norm is nonzero.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/layers.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"
#include "zero/stage3_model_state.h"
#include "zero/state_buffers.h"

namespace zero {
namespace {

using testing::world;

// y = W1 x + W2 x + W3 x, each Wi [3, 5] without bias.
class ThreeWeights : public Module {
 public:
  ThreeWeights() : Module("") {
    for (int i = 0; i < 3; ++i) linears_[i] = add_child<Linear>("w" + std::to_string(i), 5, 3, false, 0.1f);
  }
  Tensor forward(Context& ctx, const Tensor& x) override {
    Tensor y = ctx.forward(*linears_[0], x);
    for (int i = 1; i < 3; ++i) {
      Tensor yi = ctx.forward(*linears_[i], x);
      ctx.ops().add(y, yi, y);
    }
    return y;
  }
  Tensor backward(Context& ctx, const Tensor& dy) override {
    Tensor dx;
    for (int i = 2; i >= 0; --i) {
      Tensor d = ctx.backward(*linears_[i], dy);
      if (!dx.defined()) dx = d;
      else ctx.ops().add(dx, d, dx);
    }
    return dx;
  }

 private:
  Linear* linears_[3];
};

double xval(int rank, int row, int col) { return 0.1 * (col + 1) - 0.05 * row + 0.2 * rank; }
int target(int rank, int row) { return (row + 2 * rank) % 3; }

TEST(Zero3PartitionTest, GradientChunksMatchHandComputedValues) {
  if (world().world_size() != 2) GTEST_SKIP() << "a two-rank test";
  const int rank = world().rank();
  CpuBackend backend;
  EngineConfig ec;
  ec.micro_batch_size = 2;
  ec.gradient_accumulation_steps = 2;
  ec.pre_divide = 2;
  ec.zero.stage = ZeroStage::k3;
  ec.zero.param_persistence_threshold = 0;
  ec.gradient_clipping = 0;
  auto made = initialize(std::make_unique<ThreeWeights>(), ec, backend, &world());
  ASSERT_TRUE(made.ok()) << made.status();  // identical on every rank, so no collective is skipped
  Engine& engine = **made;
  auto& state = dynamic_cast<Stage3ModelState&>(engine.state());
  std::vector<Parameter*> params = engine.model().parameters();
  ASSERT_EQ(params.size(), 3u);
  // Chunks as DeepSpeed's test sets them: (i + 1)(1 + rank); padding stays 0.
  for (int i = 0; i < 3; ++i) {
    const Stage3ModelState::Chunks c = state.chunks_of(*params[i]);
    ASSERT_EQ(c.param.numel(), 8);
    const int64_t real = rank == 0 ? 8 : 7;
    std::vector<float> master(8, 0.0f);
    std::fill(master.begin(), master.begin() + real, static_cast<float>((i + 1) * (1 + rank)));
    ASSERT_TRUE(state.state_store().write(0, c.shard_offset, master).ok());
  }
  ASSERT_TRUE(state.refresh_parameters().ok());  // parameters := cast(master) on every rank

  // Full weights as every rank sees them once gathered: elements 0-7 from
  // rank 0, 8-14 from rank 1; all three summed.
  double w_sum[15];
  for (int e = 0; e < 15; ++e) w_sum[e] = (1 + 2 + 3) * (e < 8 ? 1.0 : 2.0);
  // Global gradient (mean over both ranks' 2 rows, as the pre-division by W gives).
  double grad[15] = {};
  for (int r = 0; r < 2; ++r)
    for (int row = 0; row < 2; ++row) {
      double logits[3], mx = -1e300, sum = 0;
      for (int o = 0; o < 3; ++o) {
        logits[o] = 0;
        for (int c = 0; c < 5; ++c) logits[o] += w_sum[o * 5 + c] * xval(r, row, c);
        mx = std::max(mx, logits[o]);
      }
      for (double& l : logits) sum += std::exp(l - mx);
      for (int o = 0; o < 3; ++o) {
        const double dlogit = (std::exp(logits[o] - mx) / sum - (o == target(r, row) ? 1 : 0)) / 4.0;
        for (int c = 0; c < 5; ++c) grad[o * 5 + c] += dlogit * xval(r, row, c);
      }
    }

  std::vector<float> x(10);
  std::vector<int32_t> t(2);
  for (int row = 0; row < 2; ++row) {
    t[row] = target(rank, row);
    for (int c = 0; c < 5; ++c) x[row * 5 + c] = static_cast<float>(xval(rank, row, c));
  }
  const Batch batch{Tensor::wrap(x.data(), {2, 5}, DType::kF32), Tensor::wrap(t.data(), {2}, DType::kI32)};
  for (int micro = 1; micro <= 2; ++micro) {
    engine.forward(batch).value();
    EXPECT_TRUE(engine.backward().ok());
    // The accumulated gradient is micro x the gradient of one batch (GAS 2
    // halves each micro-step's contribution).
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> g = download_fp32(backend, state.chunks_of(*params[i]).grad);
      for (int e = 0; e < 8; ++e) {
        const int full = rank * 8 + e;
        const double want = full < 15 ? micro * grad[full] / 2.0 : 0.0;  // rank 1's last element is padding
        EXPECT_NEAR(g[e], want, 1e-6) << "param " << i << " element " << full << " after micro-step " << micro;
      }
    }
    absl::StatusOr<StepResult> r = engine.step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (micro == 2 && r.ok()) {
      EXPECT_GT(r->grad_norm, 0.0);
      for (Parameter* p : params) EXPECT_FALSE(p->data.defined()) << p->name() << " still gathered after the step";
    }
  }
}

}  // namespace
}  // namespace zero
