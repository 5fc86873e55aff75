// The engine's step semantics, checked on the plain MLP classifier and a tiny
// GPT against values computed here in double:
//  * one AdamW step moves every master weight exactly as the formula says;
//  * clipping: when it bites, the applied update has exactly the clip norm;
//  * gradient accumulation 4 x micro-batch 2 equals 1 x micro-batch 8;
//  * bf16 models keep bf16 parameters equal to the rounded fp32 master;
//  * skip_init (a resumed run's engine) starts every parameter and master
//    weight at zero at every ZeRO stage, and trains from what it is given;
//  * a model of the user's own that implements no zero::Model is refused, by
//    its type, on a mesh that asks for tensor or pipeline parallelism.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/device_mesh.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"

namespace zero {
namespace {

struct MlpData {
  std::vector<float> x;
  std::vector<int32_t> y;
  MlpData(int64_t n, int64_t in, int64_t classes) {
    for (int64_t i = 0; i < n * in; ++i) x.push_back(std::sin(0.37f * static_cast<float>(i)));
    for (int64_t i = 0; i < n; ++i) y.push_back(static_cast<int32_t>((i * 3) % classes));
  }
  Batch rows(int64_t begin, int64_t count, int64_t in) {
    return {Tensor::wrap(x.data() + begin * in, {count, in}, DType::kF32),
            Tensor::wrap(y.data() + begin, {count}, DType::kI32)};
  }
};

std::unique_ptr<Engine> mlp_engine(Backend& backend, EngineConfig ec) {
  auto e = initialize(make_mlp_classifier(5, {7}, 3), ec, backend);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(e).value();
}

std::vector<std::vector<float>> all_master(Engine& e) {
  std::vector<std::vector<float>> out;
  for (Parameter* p : e.model().parameters()) out.push_back(e.master_values(*p));
  return out;
}

TEST(EngineTest, AdamWStepMatchesFormula) {
  CpuBackend backend;
  EngineConfig ec;
  ec.gradient_clipping = 0.0f;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.9f, .eps = 1e-6f, .weight_decay = 0.1f};
  auto engine = mlp_engine(backend, ec);
  MlpData data(6, 5, 3);
  const auto before = all_master(*engine);
  engine->forward(data.rows(0, 6, 5)).value();
  EXPECT_TRUE(engine->backward().ok());
  std::vector<std::vector<float>> grads;
  for (Parameter* p : engine->model().parameters()) grads.push_back(engine->grad_values(*p));
  StepResult r = engine->step().value();
  EXPECT_TRUE(r.boundary);
  EXPECT_EQ(r.global_step, 1);
  const auto after = all_master(*engine);
  for (size_t i = 0; i < before.size(); ++i) {
    for (size_t j = 0; j < before[i].size(); ++j) {
      // step 1: m = (1-b1) g, v = (1-b2) g^2, bias corrections 1-b1, 1-b2.
      const double p = before[i][j], g = grads[i][j];
      const double m = 0.2 * g, v = 0.1 * g * g;
      const double denom = std::sqrt(v) / std::sqrt(0.1) + 1e-6;
      const double expected = p - 0.01 * 0.1 * p - 0.01 / 0.2 * m / denom;
      ASSERT_NEAR(after[i][j], expected, 2e-6 * std::max(1.0, std::abs(expected))) << i << "," << j;
    }
  }
}

TEST(EngineTest, ClippingScalesTheUpdateToTheClipNorm) {
  CpuBackend backend;
  EngineConfig ec;
  ec.gradient_clipping = 1e-3f;  // far below the gradient norm, so it bites
  ec.optimizer = {.type = OptimizerType::kSGD, .lr = 1.0f};
  auto engine = mlp_engine(backend, ec);
  MlpData data(6, 5, 3);
  const auto before = all_master(*engine);
  engine->forward(data.rows(0, 6, 5)).value();
  EXPECT_TRUE(engine->backward().ok());
  StepResult r = engine->step().value();
  ASSERT_GT(r.grad_norm, 1e-2);
  const auto after = all_master(*engine);
  double update_sq = 0.0;
  for (size_t i = 0; i < before.size(); ++i)
    for (size_t j = 0; j < before[i].size(); ++j) update_sq += std::pow(double(after[i][j]) - before[i][j], 2);
  // SGD with lr 1 applies -g * clip / (norm + 1e-6): the update's norm is the clip value.
  EXPECT_NEAR(std::sqrt(update_sq), 1e-3 * r.grad_norm / (r.grad_norm + 1e-6), 1e-7);
}

TEST(EngineTest, AccumulationEqualsOneLargeBatch) {
  // fp32: the two runs sum the same per-example gradients in a different
  // order (4 partial sums of 2 vs one of 8), so they agree to rounding, ~1e-6.
  MlpData data(8, 5, 3);
  CpuBackend b1, b2;
  EngineConfig ec;
  ec.optimizer.lr = 0.05f;
  EngineConfig ec_acc = ec;
  ec_acc.gradient_accumulation_steps = 4;
  ec_acc.micro_batch_size = 2;
  auto big = mlp_engine(b1, ec);
  auto acc = mlp_engine(b2, ec_acc);
  for (int step = 0; step < 3; ++step) {
    big->forward(data.rows(0, 8, 5)).value();
    EXPECT_TRUE(big->backward().ok());
    StepResult rb = big->step().value();
    StepResult ra;
    for (int j = 0; j < 4; ++j) {
      acc->forward(data.rows(2 * j, 2, 5)).value();
      EXPECT_TRUE(acc->backward().ok());
      ra = acc->step().value();
      EXPECT_EQ(ra.boundary, j == 3);
    }
    EXPECT_NEAR(ra.loss, rb.loss, 1e-6 * rb.loss);
    EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-5 * rb.grad_norm);
  }
  const auto pa = all_master(*acc), pb = all_master(*big);
  for (size_t i = 0; i < pa.size(); ++i)
    for (size_t j = 0; j < pa[i].size(); ++j) EXPECT_NEAR(pa[i][j], pb[i][j], 1e-5) << i << "," << j;
}

TEST(EngineTest, Bf16ParametersAreRoundedMasterWeights) {
  CpuBackend backend;
  EngineConfig ec;
  ec.param_dtype = DType::kBF16;
  GptConfig cfg{.n_layer = 1, .n_head = 2, .d_model = 16, .vocab_size = 32, .seq_len = 8};
  auto engine = initialize(std::make_unique<Gpt>(cfg), ec, backend);
  ASSERT_TRUE(engine.ok());
  std::vector<int32_t> ids(16), tg(16);
  for (int i = 0; i < 16; ++i) ids[i] = (i * 5) % 32, tg[i] = (i * 7 + 1) % 32;
  Batch b{Tensor::wrap(ids.data(), {2, 8}, DType::kI32), Tensor::wrap(tg.data(), {2, 8}, DType::kI32)};
  for (int s = 0; s < 3; ++s) {
    (*engine)->forward(b).value();
    EXPECT_TRUE((*engine)->backward().ok());
    ASSERT_TRUE((*engine)->step().ok());
  }
  const MemorySnapshot mem = MemoryTracker::global().snapshot();
  EXPECT_GT(mem.at(Tier::kHost, MemCategory::kParameters).current, 0);
  for (Parameter* p : (*engine)->model().parameters()) {
    ASSERT_EQ(p->data.dtype(), DType::kBF16);
    const std::vector<float> master = (*engine)->master_values(*p);
    const uint16_t* bits = p->data.data_as<uint16_t>();
    for (int64_t i = 0; i < p->numel(); ++i) ASSERT_EQ(bits[i], float_to_bf16(master[i])) << p->name() << "[" << i << "]";
  }
}

TEST(EngineTest, SkipInitStartsAtZeroAtEveryStage) {
  CpuBackend backend;
  GptConfig cfg{.n_layer = 1, .n_head = 2, .d_model = 16, .vocab_size = 32, .seq_len = 8};
  for (ZeroStage stage : {ZeroStage::k0, ZeroStage::k1, ZeroStage::k2, ZeroStage::k3}) {
    EngineConfig ec;
    ec.zero.stage = stage;
    ec.skip_init = true;
    auto engine = initialize(std::make_unique<Gpt>(cfg), ec, backend);
    ASSERT_TRUE(engine.ok()) << engine.status();
    int64_t nonzero = 0, elements = 0;
    for (Parameter* p : (*engine)->model().parameters()) {
      for (float v : (*engine)->master_values(*p)) nonzero += v != 0.0f;
      elements += p->numel();
    }
    EXPECT_EQ(nonzero, 0) << "stage " << static_cast<int>(stage) << ": " << elements << " elements";
    // Without skip_init the same model starts from the seed's values.
    ec.skip_init = false;
    auto seeded = initialize(std::make_unique<Gpt>(cfg), ec, backend);
    ASSERT_TRUE(seeded.ok());
    for (Parameter* p : (*seeded)->model().parameters()) {
      for (float v : (*seeded)->master_values(*p)) nonzero += v != 0.0f;
    }
    EXPECT_GT(nonzero, elements / 2) << "stage " << static_cast<int>(stage);
  }
}

TEST(EngineTest, AModelWithoutTensorOrPipelineSplitsIsRefusedByItsTypeOnSuchAMesh) {
  CpuBackend backend;
  struct Case {
    MeshShape shape;
    const char* key;
  };
  for (const Case& c : {Case{{1, 2, 1}, "tensor_parallel.autotp_size 2"}, Case{{1, 1, 2}, "pipeline.stages 2"}}) {
    std::unique_ptr<DeviceMesh> mesh = DeviceMesh::dry_run(c.shape, 0).value();
    EngineConfig ec;
    ec.pipeline.stages = c.shape.pipeline;
    absl::StatusOr<std::unique_ptr<Engine>> e = Engine::create(make_mlp_classifier(5, {7}, 3), ec, backend, *mesh);
    ASSERT_FALSE(e.ok()) << c.key;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(c.key), std::string::npos) << e.status();
    EXPECT_NE(e.status().message().find("zero::Sequential"), std::string::npos) << e.status();
  }
}

}  // namespace
}  // namespace zero
