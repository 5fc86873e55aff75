// The GPT split into P pipeline stages (graph/gpt.h's PipelineStage), one per
// rank under mpirun (1-4 ranks over a 4-layer model, so 3 stages split the
// layers 2/1/1), computes what the whole model computes on one rank: the
// activations travel forward and their gradients backward point to point
// between neighbouring ranks (the communicator's send/receive), the last
// stage's loss equals the whole model's, every stage's parameter gradients
// equal the whole model's for the same names, and the token table's two
// copies (the first stage's embedding, the last stage's tied head) sum to the
// whole model's table gradient. Within fp32 rounding of different GEMM
// shapes: 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "graph/gpt.h"
#include "graph/init.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/parameters.h"

namespace zero {
namespace {

using testing::world;

const GptConfig kModel{.n_layer = 4, .n_head = 2, .d_model = 16, .vocab_size = 37, .seq_len = 8};
constexpr int64_t kBatch = 3;

// Parameters from their initialisation (by name: a stage's are the whole
// model's), gradients zero.
void materialise(Module& m, Backend& backend) { testing::materialise_parameters(m, backend, 11); }

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(double(want[i])));
    max_diff = std::max(max_diff, std::abs(double(got[i]) - want[i]));
  }
  EXPECT_LE(max_diff, 1e-5 * max_abs) << what;
  EXPECT_GT(max_abs, 0.0) << what << ": no gradient reached it";
}

TEST(GptPipelineTest, StagesComputeTheWholeModelsLossAndGradients) {
  Communicator& w = world();
  const int p = w.world_size(), r = w.rank();
  ASSERT_LE(p, kModel.n_layer);
  CpuBackend backend;
  const PipelineStage stage{r, p};
  Gpt part(kModel, nullptr, false, stage), whole(kModel);
  materialise(part, backend);
  materialise(whole, backend);

  std::vector<int32_t> ids(kBatch * kModel.seq_len), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + 3) % kModel.vocab_size);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % kModel.vocab_size);
  }
  const Tensor id_t = Tensor::wrap(ids.data(), {kBatch, kModel.seq_len}, DType::kI32, Tier::kHost);
  const Tensor target_t = Tensor::wrap(targets.data(), {kBatch * kModel.seq_len}, DType::kI32, Tier::kHost);
  const int64_t rows = kBatch * kModel.seq_len, v = kModel.vocab_size;
  const float grad_scale = 1.0f / static_cast<float>(rows);

  // The whole model on this rank.
  Context ref(backend, DType::kF32);
  Tensor logits_ref = ref.forward(whole, id_t);
  Tensor losses_ref = backend.empty({rows}, DType::kF32, MemCategory::kActivations);
  backend.ops().cross_entropy(logits_ref.view({rows, v}), target_t, grad_scale, losses_ref);
  ref.backward(whole, logits_ref);

  // The pipeline: activations forward, their gradients backward.
  const Shape act{kBatch, kModel.seq_len, kModel.d_model};
  Context ctx(backend, DType::kF32);
  Tensor x = id_t;
  if (!stage.first()) {
    x = backend.empty(act, DType::kF32, MemCategory::kActivations);
    ASSERT_TRUE(w.recv_async(x.data(), x.numel(), DType::kF32, r - 1)->wait().ok());
  }
  Tensor y = ctx.forward(part, x);
  Tensor dy;
  if (stage.last()) {
    Tensor losses = backend.empty({rows}, DType::kF32, MemCategory::kActivations);
    backend.ops().cross_entropy(y.view({rows, v}), target_t, grad_scale, losses);
    expect_near(download_fp32(backend, losses), download_fp32(backend, losses_ref), "the last stage's losses");
    dy = y;  // the logits' gradient, in place
  } else {
    ASSERT_EQ(y.shape(), act);
    ASSERT_TRUE(w.send_async(y.data(), y.numel(), DType::kF32, r + 1)->wait().ok());
    dy = backend.empty(act, DType::kF32, MemCategory::kActivations);
    ASSERT_TRUE(w.recv_async(dy.data(), dy.numel(), DType::kF32, r + 1)->wait().ok());
  }
  Tensor dx = ctx.backward(part, dy);
  if (!stage.first()) ASSERT_TRUE(w.send_async(dx.data(), dx.numel(), DType::kF32, r - 1)->wait().ok());
  EXPECT_EQ(ctx.live_frames(), 0u);

  std::map<std::string, Parameter*> by_name;
  for (Parameter* q : whole.parameters()) by_name[q->name()] = q;
  std::vector<float> table(static_cast<size_t>(v * kModel.d_model), 0.0f);
  int64_t held = 0;
  for (Parameter* q : part.parameters()) {
    ASSERT_TRUE(by_name.count(q->name())) << q->name();
    if (q->name() == "wte.weight") {
      table = download_fp32(backend, q->grad);  // this copy's part of the table's gradient
      continue;
    }
    held += q->numel();
    expect_near(download_fp32(backend, q->grad), download_fp32(backend, by_name[q->name()]->grad), q->name());
  }
  // The table's copies (first and last stage; one on one rank) sum to the whole's.
  ASSERT_TRUE(w.all_reduce(table.data(), static_cast<int64_t>(table.size()), DType::kF32, ReduceOp::kSum).ok());
  expect_near(table, download_fp32(backend, by_name["wte.weight"]->grad), "wte.weight (both copies)");
  // Every parameter but the table lives on exactly one stage.
  double all = static_cast<double>(held);
  ASSERT_TRUE(w.all_reduce_doubles(&all, 1, ReduceOp::kSum).ok());
  EXPECT_EQ(static_cast<int64_t>(all), kModel.num_parameters() - kModel.vocab_size * kModel.d_model);
}

}  // namespace
}  // namespace zero
