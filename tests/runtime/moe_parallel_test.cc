// A mixture of experts (the Mixtral family, graph/moe.h) trained by W
// data-parallel ranks at ZeRO stages 0-3, each rank one micro-batch of the
// global batch, is the model one rank trains on the same micro-batches with
// W-step gradient accumulation: the same losses (which carry the
// load-balancing and z losses, so their gradients too) and gradient norms,
// step after step. The ranks route different tokens to different experts
// (some get none on some ranks), yet every rank calls every expert, so
// ZeRO's gathers and reductions match; with a capacity, each micro-batch
// drops the same choices wherever it runs; recomputed checkpoint segments
// route as their first pass did and count their statistics once.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include "comm/device_mesh.h"
#include "core/strings.h"
#include "graph/build_model.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_weights.h"
#include "runtime/config/hf_config.h"
#include "runtime/config/json_file.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/hf_files.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

GptConfig moe_model(double capacity_factor, int64_t experts = 4) {
  GptConfig g{.arch = ModelArch::kMixtral, .n_layer = 2, .n_head = 4, .d_model = 16, .vocab_size = 37, .seq_len = 8};
  g.n_kv_head = 2;
  g.d_ff = 24;
  g.moe.num_experts = experts;
  g.moe.top_k = 2;
  g.moe.expert_d_ff = 12;
  g.moe.aux_loss_coef = 0.05f;
  g.moe.z_loss_coef = 0.01f;
  g.moe.capacity_factor = capacity_factor;
  g.moe.min_capacity = 1;
  return g;
}

constexpr int64_t kMicro = 3;
constexpr int kSteps = 6;

EngineConfig engine_config(int stage, int accumulation, int data_size, std::optional<int64_t> segments = {}) {
  EngineConfig ec;
  ec.activation_checkpointing.number_checkpoints = segments;
  ec.zero.stage = zero_stage(stage);
  ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = ec.zero.prefetch_bucket_size = 500;
  ec.zero.param_persistence_threshold = 20;
  ec.micro_batch_size = kMicro;
  ec.gradient_accumulation_steps = accumulation;
  ec.pre_divide = data_size;
  ec.optimizer = OptimizerConfig{.type = OptimizerType::kAdamW, .lr = 3e-3f};
  ec.gradient_clipping = 1.0f;
  return ec;
}

struct TrainRun {
  std::vector<double> losses, norms;
  int64_t parameters = 0;   // this rank's (Engine::num_parameters)
  std::string first_expert;  // the name of the first expert parameter this rank holds
  double first_step_tokens_on_last_experts = -1;  // the first step's choices of the upper half of the experts
  int64_t dropped = 0;
  double recompute_s = 0;  // time spent recomputing checkpointed segments
};

// W micro-batches per step: on one rank with accumulation, or one per data
// rank; with ep > 1 the experts split over expert groups of ep ranks. Steps
// [from, to): from a checkpoint in load_dir (when given), saving one into
// save_dir after the last (when given).
TrainRun train_steps(const GptConfig& model, Communicator& comm, int stage, int w, std::optional<int64_t> segments,
                     int ep, int from, int to, const std::string& load_dir = "", const std::string& save_dir = "",
                     int tp = 1) {
  TrainRun out;
  absl::StatusOr<std::unique_ptr<DeviceMesh>> mesh = DeviceMesh::create(comm);
  if (ep > 1 || tp > 1) {
    absl::StatusOr<MeshLayout> layout = MeshLayout::create("tp-ep-dp-pp", {{"tp", tp}, {"ep", ep}}, comm.world_size());
    EXPECT_TRUE(layout.ok()) << layout.status();
    if (!layout.ok()) return out;
    mesh = DeviceMesh::create(comm, *layout);
  }
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  if (!mesh.ok()) return out;
  const bool one_rank = comm.world_size() == 1;
  absl::StatusOr<std::unique_ptr<Gpt>> gpt = build_model(model, **mesh);
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  if (!gpt.ok()) return out;
  CpuBackend backend;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::create(*std::move(gpt), engine_config(stage, one_rank ? w : 1, one_rank ? 1 : w, segments), backend,
                     **mesh);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  if (!load_dir.empty()) {
    const absl::Status loaded = load_checkpoint(**engine, load_dir);
    EXPECT_TRUE(loaded.ok()) << loaded;
    if (!loaded.ok()) return out;
  }
  testing::CountingRows rows{model.seq_len, model.vocab_size};
  const int rank = (*mesh)->coordinates().data;
  out.parameters = (*engine)->num_parameters();
  for (Parameter* p : (*engine)->model().parameters()) {
    if (out.first_expert.empty() && p->name().find(".experts.") != std::string::npos) out.first_expert = p->name();
  }
  for (int step = from; step < to; ++step) {
    absl::StatusOr<StepResult> r = (*engine)->train_batch([&](int micro) -> absl::StatusOr<Batch> {
      return rows.make((step * w + (one_rank ? micro : rank)) * kMicro, kMicro);
    });
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.losses.push_back(r->loss);
    out.norms.push_back(r->grad_norm);
    EXPECT_TRUE(r->moe.has_value());
    if (r->moe) out.dropped += r->moe->dropped;
    if (r->moe && step == from) {
      out.first_step_tokens_on_last_experts = 0;
      for (const auto& [layer, tokens] : r->moe->expert_tokens) {
        for (size_t e = tokens.size() / 2; e < tokens.size(); ++e) out.first_step_tokens_on_last_experts += tokens[e];
      }
    }
    out.recompute_s += r->recompute_s;
  }
  if (!save_dir.empty()) {
    const absl::StatusOr<std::string> saved = save_checkpoint(**engine, SaveOptions{.dir = save_dir});
    EXPECT_TRUE(saved.ok()) << saved.status();
  }
  return out;
}

TrainRun train(const GptConfig& model, Communicator& comm, int stage, int w, std::optional<int64_t> segments = {},
               int ep = 1, int tp = 1) {
  return train_steps(model, comm, stage, w, segments, ep, 0, kSteps, "", "", tp);
}

// `many` trained the model `one` trained: kSteps steps of the same losses
// (within 2e-6) and gradient norms (within 1e-4).
void expect_same_run(const TrainRun& many, const TrainRun& one) {
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(many.losses.size(), static_cast<size_t>(kSteps));
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(many.losses[s], one.losses[s], 2e-6 * std::fabs(one.losses[s])) << "step " << s;
    EXPECT_NEAR(many.norms[s], one.norms[s], 1e-4 * one.norms[s]) << "step " << s;
  }
}

void expect_same_training(double capacity_factor) {
  Communicator& comm = world();
  const int w = comm.world_size();
  const GptConfig model = moe_model(capacity_factor);
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("ZeRO stage " + std::to_string(stage) + " on " + std::to_string(w) + " ranks");
    std::unique_ptr<Communicator> self = make_local_communicator();
    const TrainRun one = train(model, *self, stage, w);
    const TrainRun many = train(model, comm, stage, w);
    expect_same_run(many, one);
    EXPECT_LT(one.losses.back(), one.losses.front());
    if (capacity_factor > 0.0) {
      // This rank's drops are its micro-batch's drops in the one-rank run (summed over all there).
      EXPECT_GT(one.dropped, 0);
    }
    if (comm.rank() == 0 && stage == 0) {
      std::printf("capacity_factor %g: loss %.6f -> %.6f on one rank, %.6f -> %.6f on %d; %lld choices dropped\n",
                  capacity_factor, one.losses.front(), one.losses.back(), many.losses.front(), many.losses.back(), w,
                  static_cast<long long>(one.dropped));
    }
  }
}

TEST(MoeParallelTest, DataParallelRanksTrainTheModelOneRankTrains) { expect_same_training(0.0); }

TEST(MoeParallelTest, WithACapacityEachMicroBatchDropsTheSameChoicesWhereverItRuns) { expect_same_training(0.75); }

// Activation checkpointing recomputes each segment's routing in backward: the
// same choices, and the routing statistics counted once, so the losses and
// norms are bit for bit those of the run that keeps its activations.
TEST(MoeParallelTest, RecomputedSegmentsRouteAndCountAsTheFirstPass) {
  Communicator& comm = world();
  const GptConfig model = moe_model(0.75);
  for (int stage : {0, 3}) {
    const TrainRun kept = train(model, comm, stage, comm.world_size());
    const TrainRun recomputed = train(model, comm, stage, comm.world_size(), 2);
    EXPECT_EQ(recomputed.losses, kept.losses) << "stage " << stage;
    EXPECT_EQ(recomputed.norms, kept.norms) << "stage " << stage;
    EXPECT_EQ(recomputed.dropped, kept.dropped) << "stage " << stage;
    EXPECT_GT(recomputed.recompute_s, 0.0) << "stage " << stage << ": nothing was recomputed";
    EXPECT_EQ(kept.recompute_s, 0.0);
  }
}

// Expert parallelism (DeepSpeed-MoE's): the experts split over ep ranks, the
// tokens exchanged all-to-all, the experts' ZeRO state over the ranks that
// hold the same ones, the rest over all: the same training as one rank, at
// every stage, dropless and with a capacity; each rank holds its share of
// the experts, named by their global index.
TEST(MoeParallelTest, ExpertParallelRanksTrainTheModelOneRankTrains) {
  Communicator& comm = world();
  const int w = comm.world_size();
  constexpr int64_t kExperts = 6;
  bool ran = false;
  for (int ep : {2, 3}) {
    if (w % ep != 0) continue;
    ran = true;
    for (double capacity : {0.0, 0.75}) {
      const GptConfig model = moe_model(capacity, kExperts);
      for (int stage = 0; stage <= 3; ++stage) {
        if (capacity > 0 && stage % 3 != 0) continue;
        SCOPED_TRACE(cat("ZeRO stage ", stage, ", ep ", ep, " of ", w, " ranks, capacity_factor ", capacity));
        std::unique_ptr<Communicator> self = make_local_communicator();
        const TrainRun one = train(model, *self, stage, w);
        const TrainRun many = train(model, comm, stage, w, {}, ep);
        expect_same_run(many, one);
        EXPECT_LT(many.losses.back(), many.losses.front());
        // Two sparse blocks of kExperts experts, each 3 d_model x expert_d_ff
        // weights: this rank holds kExperts / ep of them.
        const int64_t per_expert = 3 * model.d_model * model.moe.expert_d_ff;
        EXPECT_EQ(one.parameters - many.parameters, 2 * per_expert * (kExperts - kExperts / ep));
        const int64_t first = (comm.rank() % ep) * (kExperts / ep);
        EXPECT_NE(many.first_expert.find(cat(".experts.", first, ".")), std::string::npos) << many.first_expert;
        if (comm.rank() == 0 && stage == 0) {
          std::printf("ep %d of %d ranks, capacity_factor %g: loss %.6f -> %.6f on one rank, %.6f -> %.6f split\n",
                      ep, w, capacity, one.losses.front(), one.losses.back(), many.losses.front(),
                      many.losses.back());
        }
      }
    }
  }
  if (!ran) GTEST_SKIP() << "ep 2 or 3 must divide the " << w << " ranks";
}

// With every weight zero the router's probabilities tie and every token
// picks the first experts: the ranks that hold the others receive no rows,
// yet still run their experts (on a row of zeros) so that the collectives
// match, and the run is still one rank's.
TEST(MoeParallelTest, AnExpertRankThatReceivesNoTokensStillTrainsInStep) {
  Communicator& comm = world();
  const int w = comm.world_size();
  if (w % 2 != 0) GTEST_SKIP() << "ep 2 on " << w << " ranks";
  GptConfig model = moe_model(0.0);
  model.init_std = 0.0f;
  for (int stage : {0, 3}) {
    SCOPED_TRACE(cat("ZeRO stage ", stage));
    std::unique_ptr<Communicator> self = make_local_communicator();
    const TrainRun one = train(model, *self, stage, w);
    const TrainRun many = train(model, comm, stage, w, {}, 2);
    expect_same_run(many, one);
    EXPECT_EQ(many.first_step_tokens_on_last_experts, 0);
  }
}

// A model built with every expert on a mesh with an ep axis would reduce
// its experts over the wrong ranks: refused, naming the key.
TEST(MoeParallelTest, AModelNotBuiltForTheExpertGroupIsRefused) {
  Communicator& comm = world();
  const int w = comm.world_size();
  if (w % 2 != 0) GTEST_SKIP() << "ep 2 on " << w << " ranks";
  auto mesh = DeviceMesh::create(comm, MeshLayout::create("tp-ep-dp-pp", {{"ep", 2}}, w).value());
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  CpuBackend backend;
  auto whole = Engine::create(std::make_unique<Gpt>(moe_model(0.0)), engine_config(0, 1, w), backend, **mesh);
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(whole.status().message().find("model.ep_size 2: the model"), std::string_view::npos) << whole.status();
  EXPECT_NE(whole.status().message().find("was built with every expert here"), std::string_view::npos)
      << whole.status();
  GptConfig dense = moe_model(0.0);
  dense.arch = ModelArch::kLlama;
  dense.moe = MoeConfig{};
  auto none = Engine::create(std::make_unique<Gpt>(dense), engine_config(0, 1, w), backend, **mesh);
  EXPECT_NE(none.status().message().find("has no experts to split"), std::string_view::npos) << none.status();
}

// Tensor parallelism splits the attention (and the dense MLPs) while each
// tensor rank runs the sparse MLP whole, with expert parallelism among the
// ranks of the same tensor rank: the same training as one rank.
TEST(MoeParallelTest, TensorParallelAttentionWithExpertsTrainsTheModelOneRankTrains) {
  Communicator& comm = world();
  const int w = comm.world_size();
  if (w % 2 != 0) GTEST_SKIP() << "tensor parallelism of 2 on " << w << " ranks";
  const GptConfig model = moe_model(0.0);
  for (int ep : {1, 2}) {
    if ((w / 2) % ep != 0) continue;
    for (int stage : {0, 3}) {
      SCOPED_TRACE(cat("ZeRO stage ", stage, ", tp 2 x ep ", ep, " of ", w, " ranks"));
      const int data = w / 2;
      std::unique_ptr<Communicator> self = make_local_communicator();
      const TrainRun one = train(model, *self, stage, data);
      const TrainRun many = train(model, comm, stage, data, {}, ep, 2);
      expect_same_run(many, one);
    }
  }
}

// Pipeline stages: each stage adds its own sparse layers' load-balancing
// (per layer) and z losses after its forward, and the stages' losses are
// summed; each router's backward reads its own micro-batch's routing with
// several micro-batches in flight (1F1B). With and without split experts:
// the same training as one rank. The global load-balancing loss, which
// couples the stages' layers, is refused by name.
TEST(MoeParallelTest, PipelineStagesWithExpertsTrainTheModelOneRankTrains) {
  Communicator& comm = world();
  const int w = comm.world_size();
  if (w % 2 != 0) GTEST_SKIP() << "2 pipeline stages on " << w << " ranks";
  GptConfig model = moe_model(0.0);
  model.n_layer = 4;
  {
    auto mesh = DeviceMesh::create(comm, 1, 2);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const absl::Status global = build_model(model, **mesh).status();
    EXPECT_NE(global.message().find("pipeline.stages: 2 with model.aux_loss_scope \"global\""), std::string::npos)
        << global;
  }
  model.moe.aux_loss_scope = AuxLossScope::kPerLayer;
  constexpr int kMicroBatches = 4;
  const int data = w / 2;
  auto run = [&](Communicator& c, int stage, int ep) {
    TrainRun out;
    const int stages = c.world_size() == 1 ? 1 : 2;
    auto mesh = DeviceMesh::create(c, MeshLayout::create("tp-ep-dp-pp", {{"ep", ep}, {"pp", stages}},
                                                         c.world_size()).value());
    EXPECT_TRUE(mesh.ok()) << mesh.status();
    if (!mesh.ok()) return out;
    absl::StatusOr<std::unique_ptr<Gpt>> gpt = build_model(model, **mesh);
    EXPECT_TRUE(gpt.ok()) << gpt.status();
    if (!gpt.ok()) return out;
    EngineConfig ec = engine_config(stage, stages == 1 ? data * kMicroBatches : kMicroBatches,
                                    stages == 1 ? 1 : data);
    ec.pipeline.stages = stages;
    CpuBackend backend;
    auto engine = Engine::create(*std::move(gpt), ec, backend, **mesh);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return out;
    testing::CountingRows rows{model.seq_len, model.vocab_size};
    const int d = (*mesh)->coordinates().data;
    for (int step = 0; step < kSteps; ++step) {
      absl::StatusOr<StepResult> r = (*engine)->train_batch([&](int micro) -> absl::StatusOr<Batch> {
        const int index = stages == 1 ? micro : d * kMicroBatches + micro;
        return rows.make((step * data * kMicroBatches + index) * kMicro, kMicro);
      });
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return out;
      out.losses.push_back(r->loss);
      out.norms.push_back(r->grad_norm);
    }
    return out;
  };
  for (int ep : {1, 2}) {
    if (data % ep != 0) continue;
    for (int stage : {0, 2}) {
      SCOPED_TRACE(cat("ZeRO stage ", stage, ", pp 2 x ep ", ep, " of ", w, " ranks"));
      std::unique_ptr<Communicator> self = make_local_communicator();
      const TrainRun one = run(*self, stage, 1);
      const TrainRun many = run(comm, stage, ep);
      expect_same_run(many, one);
      EXPECT_LT(many.losses.back(), many.losses.front());
    }
  }
}

// Hugging Face weights into split experts: each rank loads its experts by
// their global names, and every rank, given transformers' golden batch,
// computes transformers' loss (its load-balancing term included) while the
// tokens cross to the experts' owners and back.
TEST(MoeParallelTest, HuggingFaceWeightsLoadIntoSplitExpertsAsTransformersComputes) {
  Communicator& comm = world();
  const int w = comm.world_size();
  if (w % 2 != 0) GTEST_SKIP() << "ep 2 on " << w << " ranks";
  const std::string dir = std::string(ZE_SOURCE_DIR) + "/tests/data/hf/mixtral";
  absl::StatusOr<Json> j = load_json_file(dir + "/config.json");
  ASSERT_TRUE(j.ok()) << j.status();
  absl::StatusOr<GptConfig> config = gpt_config_from_hf(*j, dir + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<HfWeights> golden = HfWeights::open(dir + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status();
  std::vector<int32_t> ids = testing::hf_i32(*golden, "input_ids"), targets = testing::hf_i32(*golden, "targets");
  const float want = testing::hf_fp32(*golden, "loss").at(0);
  const int64_t batch = 2, seq = static_cast<int64_t>(ids.size()) / batch;
  config->seq_len = seq;
  for (int stage : {0, 3}) {
    auto mesh = DeviceMesh::create(comm, MeshLayout::create("tp-ep-dp-pp", {{"ep", 2}}, w).value());
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::StatusOr<std::unique_ptr<Gpt>> gpt = build_model(*config, **mesh);
    ASSERT_TRUE(gpt.ok()) << gpt.status();
    CpuBackend backend;
    EngineConfig ec;
    ec.micro_batch_size = batch;
    ec.zero.stage = zero_stage(stage);
    auto engine = Engine::create(*std::move(gpt), ec, backend, **mesh);
    ASSERT_TRUE(engine.ok()) << engine.status();
    ASSERT_TRUE(load_hf_weights(**engine, *config, dir).ok());
    const Batch b{Tensor::wrap(ids.data(), {batch, seq}, DType::kI32),
                  Tensor::wrap(targets.data(), {batch, seq}, DType::kI32)};
    const absl::StatusOr<float> loss = (*engine)->forward(b);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_NEAR(*loss, want, 1e-5 * std::fabs(want)) << "ZeRO stage " << stage;
    ASSERT_TRUE((*engine)->backward().ok());
  }
}

// A checkpoint of split experts names each by its global index, whichever
// ranks wrote it: the run resumes on the same layout bit for bit, and on
// another (every expert on every rank; one rank alone) as the same model.
TEST(MoeParallelTest, ExpertParallelCheckpointsResumeOnAnyLayout) {
  Communicator& comm = world();
  const int w = comm.world_size();
  const int ep = w % 2 == 0 ? 2 : w;
  constexpr int64_t kExperts = 6;
  if (kExperts % ep != 0) GTEST_SKIP() << "ep " << ep << " does not divide " << kExperts << " experts";
  const GptConfig model = moe_model(0.0, kExperts);
  const std::string dir = cat(::testing::TempDir(), "/MoeParallelTest.ep_ckpt_", w);
  for (int stage : {1, 3}) {
    SCOPED_TRACE(cat("ZeRO stage ", stage, ", ep ", ep, " of ", w, " ranks"));
    if (comm.rank() == 0) std::filesystem::remove_all(dir);
    ASSERT_TRUE(comm.barrier().ok());
    const TrainRun whole = train_steps(model, comm, stage, w, {}, ep, 0, kSteps);
    const TrainRun first = train_steps(model, comm, stage, w, {}, ep, 0, kSteps / 2, "", dir);
    ASSERT_EQ(first.losses.size(), static_cast<size_t>(kSteps / 2));
    const TrainRun same = train_steps(model, comm, stage, w, {}, ep, kSteps / 2, kSteps, dir);
    const TrainRun replicated = train_steps(model, comm, stage, w, {}, 1, kSteps / 2, kSteps, dir);
    std::unique_ptr<Communicator> self = make_local_communicator();
    const TrainRun alone = train_steps(model, *self, stage, w, {}, 1, kSteps / 2, kSteps, dir);
    ASSERT_EQ(same.losses.size(), static_cast<size_t>(kSteps - kSteps / 2));
    ASSERT_EQ(replicated.losses.size(), same.losses.size());
    ASSERT_EQ(alone.losses.size(), same.losses.size());
    for (size_t s = 0; s < same.losses.size(); ++s) {
      const size_t at = s + kSteps / 2;
      EXPECT_EQ(same.losses[s], whole.losses[at]) << "step " << at;
      EXPECT_EQ(same.norms[s], whole.norms[at]) << "step " << at;
      EXPECT_NEAR(replicated.losses[s], whole.losses[at], 2e-6 * std::fabs(whole.losses[at])) << "step " << at;
      EXPECT_NEAR(alone.losses[s], whole.losses[at], 2e-6 * std::fabs(whole.losses[at])) << "step " << at;
      EXPECT_NEAR(alone.norms[s], whole.norms[at], 1e-4 * whole.norms[at]) << "step " << at;
    }
  }
  ASSERT_TRUE(comm.barrier().ok());
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zero
