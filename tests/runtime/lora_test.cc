// LoRA (graph/lora.h) against PEFT + transformers, on the ranks this binary
// runs with (1, and 2 under mpirun).
//
// The oracle (tests/reference/make_lora_golden.py, tests/data/lora/<name>/):
// PEFT's adapters on the tiny Llama and GPT-2 of tests/data/hf, saved by
// PeftModel.save_pretrained before training (initial/) and after 5 AdamW
// steps on one batch (trained/), with the 5 losses and the trained model's
// logits. Llama: r 4, lora_alpha 8 on all seven projections (column- and
// row-parallel layers); GPT-2: r 4, lora_alpha 16 with use_rslora on c_attn
// and both c_proj (Conv1D layers, fan_in_fan_out).
// What a user would notice:
//  * our run from the same base weights and initial adapter (load_hf_weights
//    then load_peft_adapter, both from PEFT's own files) has PEFT's 5 losses
//    (1e-5 relative), PEFT's trained adapters (1e-4 of each tensor's largest
//    value) and, at the end, the trained PeftModel's logits, at ZeRO stages
//    0-3 and with the optimizer offloaded; on 2 ranks over a data group of 2
//    (stages 1 and 3), over a tensor group of 2 (the adapters split with
//    their layers) and over 2 pipeline stages;
//  * only the adapters train: every base weight is bitwise what was loaded
//    after the steps, and the engine holds optimizer state for the adapters'
//    elements only (GptConfig::lora_parameters());
//  * a fresh adapter (PEFT's init: B = 0) leaves the model the base model:
//    its first loss is transformers' base loss (tests/data/hf golden);
//  * with lora_dropout, 2 tensor ranks drop what 2 data ranks drop (the
//    row-parallel layers' input slices keyed by their features' offsets).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "comm/device_mesh.h"
#include "core/strings.h"
#include "graph/build_model.h"
#include "graph/context.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/json_file.h"
#include "runtime/config/peft_config.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/hf_files.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/tracked_bytes.h"

namespace zero {
namespace {

using testing::world;

constexpr int64_t kBatch = 2, kSeq = 16;
constexpr int kSteps = 5;

std::string data(const std::string& path) { return cat(ZE_SOURCE_DIR, "/tests/data/", path); }

struct Golden {
  std::vector<int32_t> ids, targets;
  std::vector<float> losses, logits;
  std::map<std::string, std::vector<float>> trained;  // PEFT's trained adapters, by PEFT's name
  float base_loss = 0.0f;                             // transformers' loss of the base model
};

const Golden& golden(const std::string& name) {
  static std::map<std::string, Golden> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Golden g;
  absl::StatusOr<HfWeights> w = HfWeights::open(data(cat("lora/", name, "/golden.safetensors")));
  EXPECT_TRUE(w.ok()) << w.status();
  if (w.ok()) {
    g.ids = testing::hf_i32(*w, "input_ids");
    g.targets = testing::hf_i32(*w, "targets");
    g.losses = testing::hf_fp32(*w, "losses");
    g.logits = testing::hf_fp32(*w, "logits");
  }
  absl::StatusOr<HfWeights> t = HfWeights::open(data(cat("lora/", name, "/trained/", kPeftAdapterFile)));
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) {
    for (const auto& [n, tensor] : t->tensors()) g.trained[n] = testing::hf_fp32(*t, n);
  }
  absl::StatusOr<HfWeights> base = HfWeights::open(data(cat("hf/", name, "/golden.safetensors")));
  EXPECT_TRUE(base.ok()) << base.status();
  if (base.ok()) g.base_loss = testing::hf_fp32(*base, "loss").at(0);
  return cache.emplace(name, std::move(g)).first->second;
}

// The base model of tests/data/hf/<name> with PEFT's adapter settings
// (initial/adapter_config.json).
GptConfig lora_model(const std::string& name) {
  absl::StatusOr<Json> hf = load_json_file(data(cat("hf/", name, "/config.json")));
  EXPECT_TRUE(hf.ok()) << hf.status();
  absl::StatusOr<GptConfig> c = gpt_config_from_hf(hf.value_or(Json::object()), name);
  EXPECT_TRUE(c.ok()) << c.status();
  GptConfig config = c.value_or(GptConfig{});
  config.seq_len = kSeq;
  const std::string path = data(cat("lora/", name, "/initial/", kPeftConfigFile));
  absl::StatusOr<Json> j = load_json_file(path);
  EXPECT_TRUE(j.ok()) << j.status();
  absl::StatusOr<LoraConfig> lora = lora_config_from_peft(j.value_or(Json::object()), path);
  EXPECT_TRUE(lora.ok()) << lora.status();
  config.lora = lora.value_or(LoraConfig{});
  return config;
}

struct Layout {
  int tensor = 1, data = 1, pipeline = 1;
  ZeroStage stage = ZeroStage::k0;
  bool offload = false;
  bool fresh_adapter = false;  // PEFT's initialisation (B = 0) instead of initial/
  float dropout = 0.0f;        // lora_dropout (PEFT's run has none)
};

std::string describe(const std::string& model, const Layout& l) {
  return cat(model, " T=", l.tensor, " D=", l.data, " P=", l.pipeline, " stage ", stage_number(l.stage), l.offload ? " offload" : "",
             l.fresh_adapter ? " fresh adapter" : "", l.dropout > 0.0f ? cat(" lora_dropout ", l.dropout) : "");
}

struct TrainedRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> before, after;  // every parameter (unsplit), fp32 masters / weights
  std::vector<float> logits;                                // T = D = 1, stage 0 only
  int64_t trainable = 0;         // elements of the parameters that train (requires_grad), this rank's
  int64_t adapter_elements = 0;  // of this rank's adapter parameters
  testing::Bytes state{};        // gradient and optimizer bytes the engine holds after the steps
};

TrainedRun train(const std::string& name, const Layout& l) {
  TrainedRun out;
  GptConfig config = lora_model(name);
  config.lora.dropout = l.dropout;
  const Golden& g = golden(name);
  std::unique_ptr<DeviceMesh> mesh = DeviceMesh::create(world(), l.tensor, l.pipeline).value();
  absl::StatusOr<std::unique_ptr<Gpt>> model = build_model(config, *mesh);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  EngineConfig ec;
  // Pipeline stages: the batch's rows as micro-batches of one.
  ec.micro_batch_size = kBatch / l.data / l.pipeline;
  ec.gradient_accumulation_steps = l.pipeline;
  ec.pipeline.stages = l.pipeline;
  ec.pre_divide = l.data;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                  .weight_decay = 0.0f};
  ec.gradient_clipping = 0.0f;  // PEFT's run clips nothing
  ec.zero.stage = l.stage;
  if (l.offload) {
    ec.force_offload_path = true;
    ec.zero.offload_optimizer.device = OffloadDevice::kCpu;
    if (l.stage == ZeroStage::k3) ec.zero.offload_param.device = OffloadDevice::kCpu;
  }
  CpuBackend backend;
  const testing::Bytes at_start = testing::tracked();
  absl::StatusOr<std::unique_ptr<Engine>> e = Engine::create(*std::move(model), ec, backend, *mesh);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return out;
  Engine& engine = **e;
  const absl::Status loaded = load_hf_weights(engine, config, data(cat("hf/", name)));
  EXPECT_TRUE(loaded.ok()) << loaded;
  if (!l.fresh_adapter) {
    const absl::Status adapter = load_peft_adapter(engine, config, data(cat("lora/", name, "/initial")));
    EXPECT_TRUE(adapter.ok()) << adapter;
  }
  for (Parameter* p : engine.model().parameters()) {
    if (p->requires_grad()) out.trainable += p->numel();
    if (is_lora_parameter(p->name())) out.adapter_elements += p->numel();
  }
  out.before = testing::full_master_weights(engine, mesh->tensor());
  // This data rank's rows of the batch (micro-batch m: the next ones).
  const int64_t rows = kBatch / l.data, micro = ec.micro_batch_size, first = mesh->coordinates().data * rows;
  std::vector<int32_t> ids(g.ids.begin() + first * kSeq, g.ids.begin() + (first + rows) * kSeq);
  std::vector<int32_t> targets(g.targets.begin() + first * kSeq, g.targets.begin() + (first + rows) * kSeq);
  for (int step = 0; step < kSteps; ++step) {
    const absl::StatusOr<StepResult> r = engine.train_batch([&](int m) -> absl::StatusOr<Batch> {
      return Batch{Tensor::wrap(ids.data() + m * micro * kSeq, {micro, kSeq}, DType::kI32),
                   Tensor::wrap(targets.data() + m * micro * kSeq, {micro, kSeq}, DType::kI32)};
    });
    EXPECT_TRUE(r.ok()) << r.status();
    out.losses.push_back(r.ok() ? r->loss : -1.0);
  }
  out.after = testing::full_master_weights(engine, mesh->tensor());
  const testing::Bytes at_end = testing::tracked();
  out.state = {at_end.params - at_start.params, at_end.grads - at_start.grads, at_end.optim - at_start.optim};
  if (l.tensor == 1 && l.data == 1 && l.pipeline == 1 && l.stage == ZeroStage::k0) {
    Context ctx(backend, DType::kF32);
    ctx.set_grad_enabled(false);
    Tensor input = backend.empty({kBatch, kSeq}, DType::kI32, MemCategory::kActivations);
    backend.copy(input, Tensor::wrap(const_cast<int32_t*>(g.ids.data()), {kBatch, kSeq}, DType::kI32));
    const Tensor logits = ctx.forward(engine.model(), input);
    EXPECT_TRUE(ctx.take_status().ok());
    out.logits = download_fp32(backend, logits.view({logits.numel()}));
  }
  return out;
}

double max_abs(const std::vector<float>& v) {
  double m = 0.0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// |a - b| <= tol max|b| element by element; the worst relative to max|b|.
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst / std::max(max_abs(b), 1e-30);
}

// The run against PEFT: losses, adapters, frozen base, optimizer state.
void expect_peft(const std::string& name, const Layout& l, const TrainedRun& run) {
  const std::string what = describe(name, l);
  const GptConfig config = lora_model(name);
  const Golden& g = golden(name);
  ASSERT_EQ(run.losses.size(), static_cast<size_t>(kSteps)) << what;
  ASSERT_EQ(g.losses.size(), static_cast<size_t>(kSteps)) << what;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(run.losses[s], g.losses[s], 1e-5 * g.losses[s]) << what << ": step " << s + 1;
  }
  if (world().rank() == 0) {
    std::printf("%s: losses", what.c_str());
    for (int s = 0; s < kSteps; ++s) std::printf(" %.7f (PEFT %.7f)", run.losses[s], g.losses[s]);
    std::printf("\n");
  }
  int adapters = 0;
  double worst = 0.0;
  for (const auto& [param, v] : run.after) {
    if (!is_lora_parameter(param)) {
      EXPECT_EQ(v, run.before.at(param)) << what << ": the frozen " << param << " changed";
      continue;
    }
    ++adapters;
    const std::string peft = cat("base_model.model.", hf_tensor_name(config, param));
    auto it = g.trained.find(peft);
    ASSERT_NE(it, g.trained.end()) << what << ": PEFT has no " << peft;
    const double d = worst_relative(v, it->second);
    worst = std::max(worst, d);
    EXPECT_LE(d, 1e-4) << what << ": " << param << " after " << kSteps << " steps";
  }
  // Every adapter of PEFT's, and only those (a pipeline stage: its blocks').
  const double all = l.pipeline > 1 ? world().all_reduce_sum(adapters).value_or(-1.0) : adapters;
  EXPECT_EQ(all, static_cast<double>(g.trained.size())) << what;
  if (world().rank() == 0) std::printf("%s: adapters within %.3g of PEFT's\n", what.c_str(), worst);
  EXPECT_EQ(run.trainable, run.adapter_elements) << what << ": only the adapters train";
  if (!run.logits.empty()) {
    const double d = worst_relative(run.logits, g.logits);
    std::printf("%s: logits of the trained model within %.3g of PEFT's\n", what.c_str(), d);
    EXPECT_LE(d, 1e-4) << what;
  }
}

class LoraPeftTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraPeftTest, FiveStepsMatchPeftAtEveryZeroStage) {
  if (world().world_size() != 1) GTEST_SKIP() << "one rank";
  const GptConfig config = lora_model(GetParam());
  ASSERT_TRUE(config.lora.enabled());
  for (const Layout& l : {Layout{.stage = ZeroStage::k0}, Layout{.stage = ZeroStage::k1},
                          Layout{.stage = ZeroStage::k2}, Layout{.stage = ZeroStage::k3},
                          Layout{.stage = ZeroStage::k2, .offload = true},
                          Layout{.stage = ZeroStage::k3, .offload = true}}) {
    const TrainedRun run = train(GetParam(), l);
    expect_peft(GetParam(), l, run);
    const std::string what = describe(GetParam(), l);
    EXPECT_EQ(run.trainable, config.lora_parameters()) << what;
    // Gradients and optimizer state for the adapters alone: at most a
    // gradient (4 bytes) and an fp32 master with Adam's two moments (12
    // bytes) per adapter element, where the base model has
    // num_parameters() - lora_parameters() elements.
    std::printf("%s: %lld adapter elements of %lld; gradients %lld bytes, optimizer state %lld bytes\n",
                what.c_str(), static_cast<long long>(config.lora_parameters()),
                static_cast<long long>(config.num_parameters()), static_cast<long long>(run.state.grads),
                static_cast<long long>(run.state.optim));
    if (!l.offload) {
      EXPECT_GT(run.state.optim, 0) << what;
      EXPECT_LE(run.state.optim, 12 * config.lora_parameters() + 4096) << what;
      EXPECT_LE(run.state.grads, 4 * config.lora_parameters() + 4096) << what;
    }
  }
}

TEST_P(LoraPeftTest, DataTensorAndPipelineParallelMatchPeft) {
  if (world().world_size() != 2) GTEST_SKIP() << "2 ranks";
  for (const Layout& l : {Layout{.data = 2, .stage = ZeroStage::k1}, Layout{.data = 2, .stage = ZeroStage::k3},
                          Layout{.tensor = 2, .stage = ZeroStage::k0}, Layout{.tensor = 2, .stage = ZeroStage::k1},
                          Layout{.pipeline = 2, .stage = ZeroStage::k1}}) {
    expect_peft(GetParam(), l, train(GetParam(), l));
  }
}

// lora_dropout's masks are keyed by the global sample, the position and the
// unsplit layer's feature (a row-parallel slice's offset), so 2 tensor ranks
// drop what 2 data ranks (and one rank) drop.
TEST_P(LoraPeftTest, DropoutMasksAreTheSameOverDataAndTensorRanks) {
  if (world().world_size() != 2) GTEST_SKIP() << "2 ranks";
  const TrainedRun data = train(GetParam(), Layout{.data = 2, .dropout = 0.1f});
  const TrainedRun tensor = train(GetParam(), Layout{.tensor = 2, .dropout = 0.1f});
  const TrainedRun none = train(GetParam(), Layout{.data = 2});
  ASSERT_EQ(data.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(tensor.losses.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(tensor.losses[s], data.losses[s], 1e-5 * data.losses[s]) << GetParam() << " step " << s + 1;
  }
  EXPECT_GT(std::fabs(data.losses[1] - none.losses[1]), 1e-4) << "the dropout drops";
}

TEST_P(LoraPeftTest, AFreshAdapterStartsAsTheBaseModel) {
  if (world().world_size() != 1) GTEST_SKIP() << "one rank";
  const Layout l{.fresh_adapter = true};
  const TrainedRun run = train(GetParam(), l);
  ASSERT_FALSE(run.losses.empty());
  const Golden& g = golden(GetParam());
  EXPECT_NEAR(run.losses[0], g.base_loss, 1e-5 * g.base_loss) << "B = 0: the base model's loss";
  EXPECT_LT(run.losses.back(), run.losses[0]) << "the adapters learn";
  for (const auto& [param, v] : run.before) {
    std::string module;
    if (!is_lora_parameter(param, &module) || param != lora_b_name(module)) continue;
    EXPECT_EQ(max_abs(v), 0.0) << param << ": PEFT's B starts at 0";
    EXPECT_GT(max_abs(run.after.at(param)), 0.0) << param << ": and trains";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LoraPeftTest, ::testing::Values("llama", "gpt2"));

}  // namespace
}  // namespace zero
