// tensor_parallel.tp_overlap_comm (fn::linear_copy_to_group): a
// column-parallel layer whose backward starts its input gradient's
// all-reduce, computes the weight and bias gradients while it runs, then
// waits, over a tensor group of every rank (2 or 4 under mpirun):
//  * the layer alone: output, input gradient, weight and bias gradients the
//    same bits as the unfused copy_to_group + linear; and the order that
//    makes it overlap, seen from the communicator: the all-reduce is issued
//    before the weight gradient is written and waited on after (the unfused
//    layer issues it after);
//  * a GPT trained for a few steps through the engine (ZeRO stages 0 and 3):
//    every loss and every parameter's fp32 master the same bits with the key
//    on and off, and the key does reach the column-parallel layers.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/device_mesh.h"
#include "graph/build_model.h"
#include "graph/context.h"
#include "graph/gpt.h"
#include "graph/parallel_layers.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/forwarding_communicator.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/parameters.h"

namespace zero {
namespace {

using testing::world;

// Forwards to `inner`; for each all-reduce notes the first element of a
// watched buffer (a weight gradient) when it is issued and when its wait
// begins.
class OrderProbe final : public testing::ForwardingCommunicator {
 public:
  struct Seen {
    float at_issue = 0, at_wait = 0;
    bool waited = false;
  };
  explicit OrderProbe(Communicator& inner) : ForwardingCommunicator(inner) {}
  void watch(const float* p) { watched_ = p; }
  const std::vector<std::shared_ptr<Seen>>& seen() const { return seen_; }

  std::string_view name() const override { return "order probe"; }
  CommHandle all_reduce_async(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    auto s = std::make_shared<Seen>();
    s->at_issue = *watched_;
    seen_.push_back(s);
    return std::make_shared<Work>(inner().all_reduce_async(buf, count, dtype, op), s, watched_);
  }

 private:
  class Work final : public CommWork {
   public:
    Work(CommHandle inner, std::shared_ptr<Seen> seen, const float* watched)
        : inner_(std::move(inner)), seen_(std::move(seen)), watched_(watched) {}
    absl::Status wait() override {
      if (!seen_->waited) seen_->at_wait = *watched_;
      seen_->waited = true;
      return inner_->wait();
    }
    bool done() const override { return inner_->done(); }

   private:
    CommHandle inner_;
    std::shared_ptr<Seen> seen_;
    const float* watched_;
  };
  const float* watched_ = nullptr;
  std::vector<std::shared_ptr<Seen>> seen_;
};

std::vector<float> host(Backend& backend, const Tensor& t) { return download_fp32(backend, t); }

struct LayerRun {
  std::vector<float> y, dx, dw, db;
  std::vector<std::shared_ptr<OrderProbe::Seen>> all_reduces;
};

LayerRun run_layer(bool overlap) {
  constexpr int64_t kB = 2, kT = 3, kIn = 8, kOut = 12;
  CpuBackend backend;
  OrderProbe group(world());
  ColumnParallelLinear layer("fc", kIn, kOut, /*bias=*/true, 0.5f, group);
  layer.set_overlap_comm(overlap);
  EXPECT_EQ(layer.overlap_comm(), overlap);
  testing::materialise_parameters(layer, backend, 11);
  group.watch(static_cast<const float*>(layer.weight()->grad.data()));
  // x is the same on every rank (a column layer's input); dy differs (each
  // rank's output columns), so the all-reduced dx sums different parts.
  std::vector<float> x(kB * kT * kIn), dy(kB * kT * layer.local_out());
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>((i * 7) % 13) - 0.6f;
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 0.01f * static_cast<float>((i * 5 + 3 * world().rank()) % 17) + 0.01f;
  Tensor xt = backend.empty({kB, kT, kIn}, DType::kF32, MemCategory::kActivations);
  upload_fp32(backend, x, xt);
  Context ctx(backend, DType::kF32);
  LayerRun out;
  const Tensor y = ctx.forward(layer, xt);
  out.y = host(backend, y);
  Tensor dyt = backend.empty(y.shape(), DType::kF32, MemCategory::kActivations);
  upload_fp32(backend, dy, dyt);
  const Tensor dx = ctx.backward(layer, dyt);
  EXPECT_TRUE(ctx.take_status().ok());
  out.dx = host(backend, dx);
  out.dw = host(backend, layer.weight()->grad);
  out.db = host(backend, layer.bias()->grad);
  out.all_reduces = group.seen();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(TpOverlapTest, TheFusedLayerComputesTheSameBitsAndSumsDxWhileComputingDw) {
  if (world().world_size() < 2) GTEST_SKIP() << "a tensor group of one rank has nothing to overlap";
  const LayerRun off = run_layer(false), on = run_layer(true);
  EXPECT_TRUE(same_bits(on.y, off.y));
  EXPECT_TRUE(same_bits(on.dx, off.dx));
  EXPECT_TRUE(same_bits(on.dw, off.dw));
  EXPECT_TRUE(same_bits(on.db, off.db));
  float dx_abs = 0;
  for (float v : on.dx) dx_abs += std::abs(v);
  EXPECT_GT(dx_abs, 0.0f);
  // One all-reduce each (dx's). Unfused: issued after dW was written.
  // Fused: issued before, waited on after.
  ASSERT_EQ(off.all_reduces.size(), 1u);
  ASSERT_EQ(on.all_reduces.size(), 1u);
  EXPECT_NE(off.all_reduces[0]->at_issue, 0.0f) << "unfused: dW is computed before dx's all-reduce starts";
  EXPECT_EQ(on.all_reduces[0]->at_issue, 0.0f) << "fused: dx's all-reduce starts before dW is written";
  EXPECT_TRUE(on.all_reduces[0]->waited);
  EXPECT_EQ(on.all_reduces[0]->at_wait, on.dw[0]) << "fused: dW is written before the wait";
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> masters;  // this rank's slices
  int overlapping_layers = 0;
};

TrainRun train(bool overlap, ZeroStage stage) {
  constexpr int64_t kMicro = 2, kSeq = 16, kSteps = 3;
  TrainRun out;
  GptConfig config;
  config.n_layer = 2;
  config.n_head = 4;
  config.d_model = 32;
  config.vocab_size = 64;
  config.seq_len = kSeq;
  const int tensor = 2, data = world().world_size() / tensor;
  std::unique_ptr<DeviceMesh> mesh = DeviceMesh::create(world(), tensor, 1).value();
  ModelLayout layout;
  layout.tp_overlap_comm = overlap;
  absl::StatusOr<std::unique_ptr<Gpt>> model = build_model(config, *mesh, layout);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  for (Module* m : (*model)->modules()) {
    if (auto* c = dynamic_cast<ColumnParallelLinear*>(m)) out.overlapping_layers += c->overlap_comm() ? 1 : 0;
  }
  EngineConfig ec;
  ec.micro_batch_size = kMicro;
  ec.gradient_accumulation_steps = 2;
  ec.pre_divide = data;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                  .weight_decay = 0.01f};
  ec.gradient_clipping = 1.0f;
  ec.zero.stage = stage;
  CpuBackend backend;
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::create(*std::move(model), ec, backend, *mesh);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return out;
  Engine& engine = **e;
  const int d = mesh->coordinates().data;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::vector<int32_t>> ids(2), targets(2);
    const absl::StatusOr<StepResult> r = engine.train_batch([&](int m) -> absl::StatusOr<Batch> {
      ids[m].resize(kMicro * kSeq);
      targets[m].resize(kMicro * kSeq);
      for (int64_t i = 0; i < kMicro * kSeq; ++i) {
        ids[m][i] = static_cast<int32_t>((i * 13 + step * 7 + m * 5 + d * 3) % 64);
        targets[m][i] = static_cast<int32_t>((i * 11 + step + m + d) % 64);
      }
      return Batch{Tensor::wrap(ids[m].data(), {kMicro, kSeq}, DType::kI32),
                   Tensor::wrap(targets[m].data(), {kMicro, kSeq}, DType::kI32)};
    });
    EXPECT_TRUE(r.ok()) << r.status();
    out.losses.push_back(r.ok() ? r->loss : -1.0f);
  }
  for (Parameter* p : engine.model().parameters()) {
    absl::StatusOr<std::vector<float>> m = engine.gather_master(*p);
    EXPECT_TRUE(m.ok()) << p->name() << ": " << m.status();
    if (m.ok()) out.masters[p->name()] = *std::move(m);
  }
  return out;
}

TEST(TpOverlapTest, TrainingWithTheKeyOnGivesTheSameBitsAsWithItOff) {
  if (world().world_size() % 2 != 0) GTEST_SKIP() << "a tensor group of 2 ranks";
  for (ZeroStage stage : {ZeroStage::k0, ZeroStage::k3}) {
    SCOPED_TRACE(stage == ZeroStage::k0 ? "stage 0" : "stage 3");
    const TrainRun off = train(false, stage), on = train(true, stage);
    EXPECT_EQ(off.overlapping_layers, 0);
    EXPECT_GE(on.overlapping_layers, 4) << "qkv and the MLP's first layer of each of 2 blocks";
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t i = 0; i < on.losses.size(); ++i) {
      EXPECT_EQ(std::memcmp(&on.losses[i], &off.losses[i], sizeof(float)), 0)
          << "step " << i << ": " << on.losses[i] << " vs " << off.losses[i];
    }
    EXPECT_NE(off.losses.front(), off.losses.back()) << "the steps train";
    ASSERT_EQ(on.masters.size(), off.masters.size());
    for (const auto& [name, values] : off.masters) {
      auto it = on.masters.find(name);
      ASSERT_NE(it, on.masters.end()) << name;
      EXPECT_TRUE(same_bits(it->second, values)) << name;
    }
  }
}

}  // namespace
}  // namespace zero
