// The memory planner against the engine itself (the ZeRO paper's formulas
// are tests/runtime/model_state_bytes_test.cc's).
//
//  * Planned vs measured: real training steps through the engine on this
//    process's ranks (1 in-process, 2 and 3 under mpirun), at stages 0-3,
//    fp32 and bf16, with and without activation checkpointing (and with
//    cpu_checkpointing on the device path), with several buckets, overlap
//    and stage-3 prefetch/persistence settings, NVMe and ZeRO-Offload, and
//    with optimizers other than Adam (SGD; Lion, whose one state an
//    Adam-shaped planner would count twice). The
//    plan is the engine's own dry run, so every category's peak in the
//    tracking allocator must equal it byte for byte, oneDNN's scratchpads in
//    the workspace included, and so must each tier's total; with the
//    windows the config left unset, sized to the model, too.
//  * The stages' order: on 2 ranks, each stage peaks no higher than the one
//    below, for SmolLM-135M's shape in fp32 and bf16 (planned).
// (zero-estimate's command line: zero_estimate_cli_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "comm/device_mesh.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/swap_layout.h"
#include "runtime/config/memory_preflight.h"
#include "runtime/config/run_config.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/model_state_bytes.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

// ---- planned vs measured

const GptConfig kModel{.n_layer = 4, .n_head = 2, .d_model = 32, .vocab_size = 97, .seq_len = 16};
constexpr int64_t kMicroBatch = 2;

struct Case {
  std::string name;
  int stage = 0;
  DType dtype = DType::kF32;
  std::optional<int64_t> segments;
  bool cpu_checkpointing = false;  // segment inputs to host memory on the device path (forced: graph/context.h)
  int64_t gas = 1;
  int64_t bucket = 500000000;
  bool overlap = false;
  int64_t persistence = 100000;
  int64_t reuse = 1000000000;
  int64_t prefetch = 50000000;
  OptimizerType optimizer = OptimizerType::kAdamW;
  std::string nvme_dir;  // offload_optimizer to NVMe swap files here
  int64_t param_buffers = 0;  // > 0: offload_param to NVMe too, with this many read buffers
  bool params_alone = false;  // ... with the optimizer state resident (the shard in a file of its own)
  bool cpu_offload = false;         // offload_optimizer "cpu" on the device path (forced: zero/host_step.h)
  bool cpu_offload_params = false;  // and offload_param "cpu"
  bool device_path = false;         // force_offload_path: NVMe offload through the host step too
  float dropout = 0.0f;             // model.dropout (Dropout modules' outputs and gradients)
  OptimizerPrecision precision;     // 16-bit master weights / states (bf16_master_weights_and_grads, ...)
  int tensor = 1;                   // tensor-parallel size (a mesh of world / tensor data-parallel ranks)
  bool sequence_parallel = false;   // Megatron-SP over the tensor group
  bool partition = false;           // activation_checkpointing.partition_activations
  int pipeline = 1;                 // pipeline stages (world = data x tensor x pipeline)
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  bool llama = false;               // the Llama family of kModel's size (grouped-query attention, untied head)
  bool moe = false;                 // ... as Mixtral: 4 experts per block, 2 per token (graph/moe.h)
  int expert = 1;                   // model.ep_size: the experts split over this many data-parallel ranks
  int64_t interval = 0;             // pipeline.activation_checkpoint_interval
  int64_t per_virtual = 0;          // pipeline.num_layers_per_virtual_stage (interleaved chunks)
  bool windows_unset = false;       // the config left the windows unset: sized to the model (zero/window_sizes.h)
};

EngineConfig engine_config(const Case& c) {
  EngineConfig e;
  e.param_dtype = c.dtype;
  e.micro_batch_size = kMicroBatch;
  e.gradient_accumulation_steps = c.gas;
  e.pre_divide = world().world_size() / (c.tensor * c.pipeline);
  e.pipeline.stages = c.pipeline;
  e.pipeline.schedule = c.schedule;
  e.pipeline.activation_checkpoint_interval = c.interval;
  e.pipeline.num_layers_per_virtual_stage = c.per_virtual;
  e.zero.stage = zero_stage(c.stage);
  e.zero.reduce_bucket_size = c.bucket;
  e.zero.overlap_comm = c.overlap;
  e.zero.param_persistence_threshold = c.persistence;
  e.zero.max_reuse_distance = c.reuse;
  e.zero.prefetch_bucket_size = c.prefetch;
  if (c.windows_unset) e.zero.given = {false, false, false, false};
  e.optimizer.type = c.optimizer;
  e.optimizer_precision = c.precision;
  e.activation_checkpointing.number_checkpoints = c.segments;
  e.activation_checkpointing.partition_activations = c.partition;
  if (!c.nvme_dir.empty() && !c.params_alone) {
    e.zero.offload_optimizer.device = OffloadDevice::kNvme;
    e.zero.offload_optimizer.nvme_path = c.nvme_dir;
    e.zero.offload_optimizer.buffer_count = 3;
    e.zero.sub_group_size = 4000;
  }
  if (c.param_buffers > 0) {
    e.zero.offload_param.device = OffloadDevice::kNvme;
    e.zero.offload_param.nvme_path = c.nvme_dir;
    e.zero.offload_param.buffer_count = c.param_buffers;
    if (c.params_alone) e.zero.offload_param.buffer_size = 6000;  // records smaller than the shard
  }
  e.force_offload_path = c.device_path;
  if (c.cpu_offload) {
    e.force_offload_path = true;
    e.zero.offload_optimizer.device = OffloadDevice::kCpu;
    e.zero.sub_group_size = 4000;
    if (c.cpu_offload_params) e.zero.offload_param.device = OffloadDevice::kCpu;
  }
  if (c.cpu_checkpointing) {
    e.force_offload_path = true;
    e.activation_checkpointing.cpu_checkpointing = true;
  }
  return e;
}

using Peaks = std::array<std::array<int64_t, kNumMemCategories>, kNumTiers>;

struct Measured {
  Peaks peak{};
  std::array<int64_t, kNumTiers> total{};
};

// Peaks of a real run of `steps` optimizer steps, from engine creation on,
// relative to what was allocated before it.
Measured measure(const EngineConfig& e, int steps, const GptConfig& model = kModel, int tensor = 1,
                 bool sequence_parallel = false, int expert = 1) {
  std::unique_ptr<DeviceMesh> mesh =
      expert > 1 ? DeviceMesh::create(world(), MeshLayout::create("tp-ep-dp-pp", {{"tp", tensor}, {"ep", expert}},
                                                                  world().world_size())
                                                   .value())
                       .value()
                 : DeviceMesh::create(world(), tensor, e.pipeline.stages).value();
  const PipelineStage stage =
      gpt_pipeline_stage(model, mesh->coordinates().pipeline, e.pipeline.stages, e.pipeline.partition_method,
                         e.pipeline.num_layers_per_virtual_stage)
          .value();
  MemoryTracker::global().reset_peaks();
  const MemorySnapshot before = MemoryTracker::global().snapshot();
  {
    CpuBackend backend;
    auto engine =
        Engine::create(std::make_unique<Gpt>(model, &mesh->tensor(), sequence_parallel, stage, &mesh->expert()), e,
                       backend, *mesh);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    const int64_t n = kMicroBatch * kModel.seq_len;
    std::vector<int32_t> ids(n), targets(n);
    for (int step = 0; step < steps; ++step) {
      const absl::StatusOr<StepResult> r = (*engine)->train_batch([&](int micro) -> absl::StatusOr<Batch> {
        for (int64_t i = 0; i < n; ++i) {
          ids[i] = static_cast<int32_t>((i * 5 + step * 3 + micro + mesh->coordinates().data * 7) %
                                        kModel.vocab_size);
          targets[i] = (ids[i] + 1) % static_cast<int32_t>(kModel.vocab_size);
        }
        return Batch{Tensor::wrap(ids.data(), {kMicroBatch, kModel.seq_len}, DType::kI32),
                     Tensor::wrap(targets.data(), {kMicroBatch, kModel.seq_len}, DType::kI32)};
      });
      EXPECT_TRUE(r.ok()) << r.status();
    }
  }
  const MemorySnapshot after = MemoryTracker::global().snapshot();
  Measured m;
  for (int t = 0; t < kNumTiers; ++t) {
    for (int c = 0; c < kNumMemCategories; ++c)
      m.peak[t][c] = after.by_category[t][c].peak - before.by_category[t][c].current;
    m.total[t] = after.allocated[t].peak - before.allocated[t].current;
  }
  return m;
}

// What the planner is asked for `c` on this rank of this process's world.
PlanInput plan_input(const Case& c) {
  PlanInput in;
  in.model = kModel;
  if (c.llama || c.moe) {
    in.model.arch = c.moe ? ModelArch::kMixtral : ModelArch::kLlama;
    in.model.n_kv_head = 1;
    in.model.d_ff = 3 * kModel.d_model;
  }
  if (c.moe) {
    in.model.moe.num_experts = 4;
    in.model.moe.top_k = 2;
    in.model.moe.expert_d_ff = kModel.d_model;
    in.model.moe.aux_loss_coef = 0.02f;
  }
  in.model.dropout = c.dropout;
  in.micro_batch = kMicroBatch;
  in.engine = engine_config(c);
  in.world = world().world_size();
  in.tensor = c.tensor;
  in.expert = c.expert;
  in.sequence_parallel = c.sequence_parallel;
  in.rank = world().rank();
  return in;
}

// Plans `c` and runs it; every category's and tier's peak must equal the
// plan. The plan is stored in *out when given.
void expect_plan_matches(const Case& c, MemoryPlan* out = nullptr) {
  const PlanInput in = plan_input(c);
  absl::StatusOr<MemoryPlan> plan = plan_memory(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  if (out != nullptr) *out = *plan;
  const Measured got = measure(in.engine, 3, in.model, c.tensor, c.sequence_parallel);
  const std::string where = cat(c.name, " (rank ", in.rank, " of ", in.world, ")");
  for (int t = 0; t < kNumTiers; ++t) {
    for (int ci = 0; ci < kNumMemCategories; ++ci) {
      const MemCategory cat_ = static_cast<MemCategory>(ci);
      const int64_t want = plan->peak[t][ci], have = got.peak[t][ci];
      EXPECT_EQ(have, want) << where << ": " << tier_name(static_cast<Tier>(t)) << " " << mem_category_name(cat_);
    }
    EXPECT_EQ(got.total[t], plan->total_peak[t]) << where << ": total";
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (std::optional<int64_t> k : {std::optional<int64_t>(), std::optional<int64_t>(1),
                                       std::optional<int64_t>(2), std::optional<int64_t>(4)}) {
        Case c;
        c.stage = stage;
        c.dtype = dtype;
        c.segments = k;
        c.name = cat("stage ", stage, " ", dtype_name(dtype), k ? cat(", ", *k, " segments") : "");
        out.push_back(c);
      }
    }
  }
  return out;
}

TEST(MemoryPlanTest, PlanEqualsMeasuredPeaksAtEveryStage) {
  for (const Case& c : cases()) expect_plan_matches(c);
}

// Tensor parallelism (T = 2 over 2 ranks): each rank's slice of the model,
// its vocabulary slice of the logits and its heads' activations, planned on a
// dry-run mesh, equal the measured peaks.
TEST(MemoryPlanTest, PlanEqualsMeasuredWithTensorParallelism) {
  if (world().world_size() % 2 != 0) GTEST_SKIP() << "a tensor group of 2 needs an even world";
  for (int stage : {0, 1, 2, 3}) {
    for (std::optional<int64_t> k : {std::optional<int64_t>(), std::optional<int64_t>(2)}) {
      for (bool sp : {false, true}) {
        Case c;
        c.stage = stage;
        c.tensor = 2;
        c.segments = k;
        c.sequence_parallel = sp;
        c.name = cat("T=2 stage ", stage, k ? ", 2 segments" : "", sp ? ", sequence parallel" : "");
        expect_plan_matches(c);
      }
    }
    // partition_activations: each rank keeps half of every segment input
    // (with and without the inputs in host memory), planned as measured, and
    // the activations' peak is lower than with the whole inputs.
    for (bool cpu : {false, true}) {
      Case c;
      c.stage = stage;
      c.tensor = 2;
      c.segments = 4;
      c.cpu_checkpointing = cpu;
      c.name = cat("T=2 stage ", stage, ", 4 segments", cpu ? ", cpu_checkpointing" : "");
      MemoryPlan whole, parts;
      expect_plan_matches(c, &whole);
      c.partition = true;
      c.name += ", partition_activations";
      expect_plan_matches(c, &parts);
      const Tier tier = Tier::kHost;
      EXPECT_LT(parts.at(tier, MemCategory::kActivations), whole.at(tier, MemCategory::kActivations)) << c.name;
    }
  }
}

// Pipeline stages (P = the world: 2 or 3 stages of the 4-layer model): each
// rank plans its own stage (the first with the embeddings, the last with the
// head and its copy of the token table, the tied gradients' sum buffer),
// the micro-batches 1F1B or GPipe keep alive, the received activations and
// gradients and the sends in flight, with and without checkpointing every
// block; planned as measured.
TEST(MemoryPlanTest, PlanEqualsMeasuredWithPipelineStages) {
  const int p = world().world_size();
  if (p < 2) GTEST_SKIP() << "needs 2 or more ranks (one per stage)";
  for (int stage : {0, 2}) {
    for (PipelineScheduleKind schedule : {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kGPipe}) {
      for (int64_t interval : {0, 1}) {
        Case c;
        c.stage = stage;
        c.pipeline = p;
        c.schedule = schedule;
        c.gas = 4;
        c.interval = interval;
        c.name = cat("P=", p, " ", pipeline_schedule_name(schedule), " stage ", stage,
                     interval > 0 ? ", every block checkpointed" : "");
        expect_plan_matches(c);
      }
    }
  }
}

// Interleaved stages (2 chunks of one block each on 2 stages): the
// (chunk, micro-batch) pairs alive, the receive buffers of both directions
// and the last stage's copies of the targets; planned as measured.
TEST(MemoryPlanTest, PlanEqualsMeasuredWithInterleavedStages) {
  if (world().world_size() != 2) GTEST_SKIP() << "needs 2 ranks (2 stages of 2 chunks of kModel's 4 blocks)";
  for (int stage : {0, 2}) {
    for (int64_t interval : {0, 1}) {
      Case c;
      c.stage = stage;
      c.pipeline = 2;
      c.per_virtual = 1;
      c.gas = 4;
      c.interval = interval;
      c.name = cat("P=2 v=2 stage ", stage, interval > 0 ? ", every block checkpointed" : "");
      expect_plan_matches(c);
    }
  }
}

// cpu_checkpointing on the device path (forced on the CPU backend): the
// segment inputs' host copies and the transient compute-tier copies (the
// recomputing segment's and the prefetched next one's) are activations of
// the host tier here, both mirrored allocation by allocation.
TEST(MemoryPlanTest, PlanEqualsMeasuredWithCpuCheckpointing) {
  for (int stage : {0, 1, 3}) {
    for (int64_t k : {1, 2, 4}) {
      Case c;
      c.stage = stage;
      c.dtype = stage == 1 ? DType::kF32 : DType::kBF16;
      c.segments = k;
      c.cpu_checkpointing = true;
      c.gas = stage == 3 ? 2 : 1;
      c.name = cat("stage ", stage, " ", dtype_name(c.dtype), ", ", k, " segments, cpu_checkpointing");
      expect_plan_matches(c);
    }
  }
  // Planned for a GPU (no forcing): host activations are exactly the K
  // segment inputs, and the device's activation peak is lower than with
  // checkpointing alone (4 segments: backward holds two inputs, not four).
  PlanInput in;
  in.model = kModel;
  in.micro_batch = kMicroBatch;
  in.world = world().world_size();
  in.rank = world().rank();
  in.compute_tier = Tier::kDevice;
  Case c;
  c.segments = 4;
  in.engine = engine_config(c);
  const absl::StatusOr<MemoryPlan> alone = plan_memory(in);
  in.engine.activation_checkpointing.cpu_checkpointing = true;
  const absl::StatusOr<MemoryPlan> offloaded = plan_memory(in);
  ASSERT_TRUE(alone.ok() && offloaded.ok());
  const int64_t input_bytes = kMicroBatch * kModel.seq_len * kModel.d_model * 4;
  EXPECT_EQ(alone->at(Tier::kHost, MemCategory::kActivations), 0);
  EXPECT_EQ(offloaded->at(Tier::kHost, MemCategory::kActivations), 4 * input_bytes);
  EXPECT_LT(offloaded->at(Tier::kDevice, MemCategory::kActivations),
            alone->at(Tier::kDevice, MemCategory::kActivations));
}

// Dropout's outputs (and gradients in backward) are activations the planner
// mirrors module by module; the masks take no memory.
TEST(MemoryPlanTest, PlanEqualsMeasuredWithDropout) {
  for (int stage : {0, 3}) {
    for (std::optional<int64_t> k : {std::optional<int64_t>(), std::optional<int64_t>(2)}) {
      Case c;
      c.stage = stage;
      c.dtype = stage == 3 ? DType::kBF16 : DType::kF32;
      c.segments = k;
      c.dropout = 0.1f;
      c.name = cat("stage ", stage, " ", dtype_name(c.dtype), k ? cat(", ", *k, " segments") : "", ", dropout 0.1");
      expect_plan_matches(c);
    }
  }
  // Dropout holds more activations than none (planned, and so measured).
  PlanInput in = plan_input(Case{});
  const int64_t without = plan_memory(in).value().at(Tier::kHost, MemCategory::kActivations);
  in.model.dropout = 0.1f;
  EXPECT_GT(plan_memory(in).value().at(Tier::kHost, MemCategory::kActivations), without);
}

// The Llama family: RMSNorm's saved rstd, RoPE in place, the SwiGLU gate's
// two saved activations, grouped-query attention's smaller k and v, the
// untied head, with and without checkpointing, at stages 0 and 3 and with
// the optimizer state on NVMe.
TEST(MemoryPlanTest, PlanEqualsMeasuredForTheLlamaFamily) {
  const std::string dir = ::testing::TempDir() + "/memory_plan_test.swap";
  std::filesystem::create_directories(dir);
  for (int stage : {0, 3}) {
    for (std::optional<int64_t> k : {std::optional<int64_t>(), std::optional<int64_t>(2)}) {
      Case c;
      c.llama = true;
      c.stage = stage;
      c.dtype = stage == 3 ? DType::kBF16 : DType::kF32;
      c.segments = k;
#ifdef ZE_HAVE_NVME_OFFLOAD
      if (stage == 3 && k) c.nvme_dir = dir;
#endif
      c.name = cat("Llama, stage ", stage, " ", dtype_name(c.dtype), k ? cat(", ", *k, " segments") : "",
                   c.nvme_dir.empty() ? "" : ", optimizer on NVMe");
      expect_plan_matches(c);
    }
  }
}

// A mixture of experts: the router's probabilities, the dispatched rows and
// each expert's activations. The dry run routes evenly; the real run's
// routing is its own, but every token still makes k choices, so the rows
// the experts hold add up the same and the peaks agree.
TEST(MemoryPlanTest, PlanEqualsMeasuredForAMixtureOfExperts) {
  for (int stage : {0, 3}) {
    for (std::optional<int64_t> k : {std::optional<int64_t>(), std::optional<int64_t>(2)}) {
      Case c;
      c.moe = true;
      c.stage = stage;
      c.segments = k;
      c.name = cat("Mixtral, stage ", stage, k ? cat(", ", *k, " segments") : "");
      expect_plan_matches(c);
    }
  }
}

// Expert parallelism: each rank holds its share of the experts, their state
// sharded over the expert-data group: parameters, gradients and optimizer
// state as measured, byte for byte. The exchange buffers hold the rows this
// rank's experts received, which the dry run takes as an even share: the
// real routing's peaks differ by what its ranks received beyond that.
TEST(MemoryPlanTest, PlanEqualsMeasuredStateWithExpertParallelism) {
  if (world().world_size() % 2 != 0) GTEST_SKIP() << "expert groups of 2 need an even world";
  for (int stage : {0, 1, 2, 3}) {
    Case c;
    c.moe = true;
    c.expert = 2;
    c.stage = stage;
    const PlanInput in = plan_input(c);
    absl::StatusOr<MemoryPlan> plan = plan_memory(in);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Case whole = c;
    whole.expert = 1;
    absl::StatusOr<MemoryPlan> replicated = plan_memory(plan_input(whole));
    ASSERT_TRUE(replicated.ok()) << replicated.status();
    const Measured got = measure(in.engine, 3, in.model, 1, false, 2);
    const std::string where = cat("Mixtral, ep 2, stage ", stage, " (rank ", in.rank, " of ", in.world, ")");
    const int h = static_cast<int>(Tier::kHost);
    for (MemCategory m : {MemCategory::kParameters, MemCategory::kGradients, MemCategory::kOptimizerState}) {
      EXPECT_EQ(got.peak[h][static_cast<int>(m)], plan->peak[h][static_cast<int>(m)])
          << where << ": " << mem_category_name(m);
    }
    // Half the experts per rank: less of each than with every expert here
    // (at stage 3 the parameters are gathered one module at a time).
    EXPECT_LT(plan->num_parameters, replicated->num_parameters) << where;
    if (stage < 3) {
      EXPECT_LT(plan->peak[h][static_cast<int>(MemCategory::kParameters)],
                replicated->peak[h][static_cast<int>(MemCategory::kParameters)])
          << where;
    }
    const int64_t planned = plan->peak[h][static_cast<int>(MemCategory::kActivations)];
    const int64_t measured = got.peak[h][static_cast<int>(MemCategory::kActivations)];
    if (stage == 0 && in.rank == 0) {
      std::printf("ep 2: activations planned %lld, measured %lld bytes\n", static_cast<long long>(planned),
                  static_cast<long long>(measured));
    }
    EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(planned), 0.25 * static_cast<double>(planned))
        << where;
  }
}

TEST(MemoryPlanTest, PlanEqualsMeasuredWithBucketsOverlapAndAccumulation) {
  std::vector<Case> more;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {false, true}) {
      Case c;
      c.stage = stage;
      c.dtype = DType::kBF16;
      c.bucket = 3000;  // several buckets (stages 0-2) / a bounded in-flight window (stage 3)
      c.overlap = overlap;
      c.gas = 2;
      c.segments = 2;
      c.name = cat("stage ", stage, " bf16, 3000-element buckets, overlap ", overlap, ", 2 micro-steps");
      more.push_back(c);
    }
  }
  // Windows the config left unset, sized to the model (zero/window_sizes.h).
  for (int stage : {2, 3}) {
    for (bool overlap : {false, true}) {
      Case c;
      c.stage = stage;
      c.dtype = DType::kBF16;
      c.overlap = overlap;
      c.windows_unset = true;
      c.name = cat("stage ", stage, " bf16, windows sized to the model, overlap ", overlap);
      more.push_back(c);
    }
  }
  // Stage 3: release everything at once, persistence off, a small prefetch window.
  for (int64_t reuse : {int64_t{0}, int64_t{5000}}) {
    Case c;
    c.stage = 3;
    c.dtype = DType::kBF16;
    c.reuse = reuse;
    c.persistence = reuse == 0 ? 0 : 100;
    c.prefetch = 2000;
    c.segments = 4;
    c.name = cat("stage 3, reuse distance ", reuse, ", persistence ", c.persistence, ", prefetch 2000");
    more.push_back(c);
  }
  Case sgd;
  sgd.stage = 1;
  sgd.optimizer = OptimizerType::kSGD;
  sgd.name = "stage 1 SGD";
  more.push_back(sgd);
  // 16-bit master weights (and states): the arrays in their dtypes, the
  // optimizer's fp32 staging as workspace; also through the host step.
  for (const OptimizerPrecision& p : {OptimizerPrecision{DType::kBF16, DType::kF32},
                                      OptimizerPrecision{DType::kBF16, DType::kBF16}}) {
    for (int stage = 1; stage <= 3; ++stage) {
      Case c;
      c.stage = stage;
      c.dtype = DType::kBF16;
      c.precision = p;
      c.cpu_offload = stage == 2;
      c.name = cat("stage ", stage, " bf16 master, ", dtype_name(p.states), " states",
                   c.cpu_offload ? ", through the host step" : "");
      more.push_back(c);
    }
  }
#ifdef ZE_HAVE_NVME_OFFLOAD
  // Optimizer state in swap files: the file on the NVMe tier, the buffers as
  // host swap buffers, no optimizer state in host memory.
  const std::string dir = ::testing::TempDir() + "/memory_plan_test.swap";
  std::filesystem::create_directories(dir);
  for (int stage = 1; stage <= 3; ++stage) {
    Case c;
    c.stage = stage;
    c.dtype = DType::kBF16;
    c.nvme_dir = dir;
    c.name = cat("stage ", stage, " bf16, optimizer state on NVMe");
    more.push_back(c);
    c.precision = {DType::kBF16, DType::kBF16};
    c.name = cat("stage ", stage, " bf16, bf16 master and states on NVMe");
    more.push_back(c);
  }
  // Parameters in the swap records too: no parameter shard in memory, read
  // buffers beside the record buffers; with one read buffer every prefetch
  // is skipped, with five they run ahead (a small window, no reuse).
  for (int64_t buffers : {1, 5}) {
    Case c;
    c.stage = 3;
    c.dtype = DType::kBF16;
    c.nvme_dir = dir;
    c.param_buffers = buffers;
    c.prefetch = 3000;
    c.reuse = 0;
    c.persistence = 0;
    c.name = cat("stage 3 bf16, optimizer state and parameters on NVMe, ", buffers, " read buffers");
    more.push_back(c);
  }
  // Parameters alone on NVMe: the optimizer state resident (on the device
  // path: on the host backend beside the host step's staging), the shard in
  // a swap file of its own (parameters on the NVMe tier), its write and read
  // buffers as host swap buffers.
  for (bool device_path : {false, true}) {
    for (int64_t buffers : {1, 5}) {
      Case c;
      c.stage = 3;
      c.dtype = DType::kBF16;
      c.nvme_dir = dir;
      c.param_buffers = buffers;
      c.params_alone = true;
      c.cpu_offload = device_path;
      c.prefetch = 3000;
      c.reuse = 0;
      c.persistence = 0;
      c.name = cat("stage 3 bf16, parameters alone on NVMe, ", buffers, " read buffers",
                   device_path ? ", optimizer state on the host step" : "");
      more.push_back(c);
    }
  }
  // The same on the device path (ZeRO-Infinity through the host step, forced
  // on the CPU backend): the file on the NVMe tier, its buffers as host swap
  // buffers, the host step's staging (and at stage 3 the gathers' read
  // staging) as host comm buffers, no optimizer state in memory.
  for (int stage = 1; stage <= 3; ++stage) {
    for (int64_t buffers : {int64_t{0}, int64_t{2}}) {
      if (buffers > 0 && stage != 3) continue;
      Case c;
      c.stage = stage;
      c.dtype = stage == 2 ? DType::kF32 : DType::kBF16;
      c.nvme_dir = dir;
      c.device_path = true;
      c.param_buffers = buffers;
      if (buffers > 0) {
        c.prefetch = 3000;
        c.reuse = 0;
        c.persistence = 0;
      }
      c.name = cat("stage ", stage, " ", dtype_name(c.dtype), ", optimizer state", buffers > 0 ? " and parameters" : "",
                   " on NVMe through the host step");
      more.push_back(c);
    }
  }
#endif
  // ZeRO-Offload's device path (forced on the CPU backend): the optimizer
  // state on the host backend, the pinned staging as comm buffers; at stage
  // 3 with offload_param "cpu" the parameter shard in host memory and no
  // weight staging.
  for (int stage = 1; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Case c;
      c.stage = stage;
      c.dtype = dtype;
      c.cpu_offload = true;
      c.name = cat("stage ", stage, " ", dtype_name(dtype), ", optimizer state offloaded to the CPU");
      more.push_back(c);
    }
  }
  Case params;
  params.stage = 3;
  params.dtype = DType::kBF16;
  params.cpu_offload = params.cpu_offload_params = true;
  params.prefetch = 3000;
  params.reuse = 0;
  params.name = "stage 3 bf16, optimizer state and parameters offloaded to the CPU";
  more.push_back(params);
  for (const Case& c : more) expect_plan_matches(c);
}

// Lion keeps ONE state array (exp_avg) beside the master where Adam keeps two:
// planned equals measured in every category and tier at stages 0-3 (the plan
// is the engine's own dry run, so it asks the optimizer what it keeps), and
// the optimizer state is 8 bytes per owned parameter with an fp32 master (4 at
// stage 0 in fp32, where the master is the parameters themselves), not the 12
// (8) a planner that assumed Adam's state would count; with bf16 master and
// states, 4.
// What a user comparing stages notices: on 2 ranks each stage's peak is at
// most the stage below's, in fp32 and bf16, for SmolLM-135M's shape (30
// Llama blocks of 576, tied head, sequence 256) with DeepSpeed's window
// defaults left unset. With those defaults taken as set, stage 2's one
// bucket is the whole gradient and stage 3 gathers the whole model ahead,
// and both stages peak above stage 1 (what issue 31 found: 3.31 GiB RSS at
// stage 1, 3.56 GiB at stage 2). The plan is the engine's dry run, held to
// the measured peaks by the tests above; allocated equals reserved here,
// since the host cache never lifts reserved above allocated's mark.
TEST(MemoryPlanTest, EachStagePeaksNoHigherThanTheStageBelowOnTwoRanks) {
  if (world().rank() != 0) GTEST_SKIP() << "plans only: one rank does it";
  GptConfig smollm;
  smollm.arch = ModelArch::kLlama;
  smollm.n_layer = 30;
  smollm.n_head = 9;
  smollm.n_kv_head = 3;
  smollm.d_model = 576;
  smollm.d_ff = 1536;
  smollm.vocab_size = 49152;
  smollm.seq_len = 256;
  smollm.tie_word_embeddings = true;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool unset : {true, false}) {
      std::vector<int64_t> peaks;
      for (int stage = 0; stage <= 3; ++stage) {
        PlanInput in;
        in.model = smollm;
        in.micro_batch = 1;
        in.world = 2;
        in.engine.param_dtype = dtype;
        in.engine.micro_batch_size = 1;
        in.engine.zero.stage = zero_stage(stage);
        if (unset) in.engine.zero.given = {false, false, false, false};
        const absl::StatusOr<MemoryPlan> plan = plan_memory(in);
        ASSERT_TRUE(plan.ok()) << plan.status();
        peaks.push_back(plan->total(Tier::kHost));
      }
      const std::string what = cat(dtype_name(dtype), unset ? ", windows unset" : ", DeepSpeed's windows as set");
      if (unset) {
        for (int stage = 1; stage <= 3; ++stage)
          EXPECT_LE(peaks[stage], peaks[stage - 1]) << what << ": stage " << stage << " against stage " << stage - 1;
      } else {
        EXPECT_GT(peaks[2], peaks[1]) << what << ": stage 2's one bucket is the whole gradient";
        EXPECT_GT(peaks[3], peaks[1]) << what << ": stage 3 gathers the whole model ahead";
      }
    }
  }
}

TEST(MemoryPlanTest, PlanEqualsMeasuredWithLion) {
  const int host = static_cast<int>(Tier::kHost), state = static_cast<int>(MemCategory::kOptimizerState);
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Case c;
      c.stage = stage;
      c.dtype = dtype;
      c.optimizer = OptimizerType::kLion;
      c.segments = 2;
      c.name = cat("stage ", stage, " ", dtype_name(dtype), " Lion");
      MemoryPlan plan;
      expect_plan_matches(c, &plan);
      const int64_t master = stage == 0 && dtype == DType::kF32 ? 0 : 4;
      ASSERT_GT(plan.partition_numel, 0) << c.name;
      EXPECT_EQ(plan.peak[host][state], (master + 4) * plan.partition_numel) << c.name;
      // Adam on the same run: a second fp32 state.
      Case adam = c;
      adam.optimizer = OptimizerType::kAdamW;
      const PlanInput in = plan_input(adam);
      const MemoryPlan adam_plan = plan_memory(in).value();
      EXPECT_EQ(adam_plan.peak[host][state], (master + 8) * adam_plan.partition_numel) << c.name;
      EXPECT_EQ(adam_plan.peak[host][state] - plan.peak[host][state], 4 * plan.partition_numel) << c.name;
    }
  }
  // bf16 master weights and states (2 + 2 bytes; one bf16 staging array more
  // than the master's as workspace), resident and through the host step.
  for (bool host_step : {false, true}) {
    Case c;
    c.stage = 2;
    c.dtype = DType::kBF16;
    c.optimizer = OptimizerType::kLion;
    c.precision = {DType::kBF16, DType::kBF16};
    c.cpu_offload = host_step;
    c.name = cat("stage 2 bf16 Lion, bf16 master and states", host_step ? ", through the host step" : "");
    MemoryPlan plan;
    expect_plan_matches(c, &plan);
    EXPECT_EQ(plan.peak[host][state], 4 * plan.partition_numel) << c.name;
  }
#ifdef ZE_HAVE_NVME_OFFLOAD
  // On NVMe: records of two arrays (master, exp_avg), not Adam's three.
  const std::string dir = ::testing::TempDir() + "/memory_plan_test.lion.swap";
  std::filesystem::create_directories(dir);
  Case c;
  c.stage = 2;
  c.dtype = DType::kBF16;
  c.optimizer = OptimizerType::kLion;
  c.nvme_dir = dir;
  c.name = "stage 2 bf16 Lion, optimizer state on NVMe";
  MemoryPlan plan;
  expect_plan_matches(c, &plan);
  EXPECT_EQ(plan.peak[host][state], 0);
  EXPECT_EQ(plan.peak[static_cast<int>(Tier::kNvme)][state],
            SwapLayout::make(plan.partition_numel, 4000, 2).file_bytes());
#endif
}

// The activation peak on its own: the prediction for every checkpoint policy
// equals what the tracking allocator sees, and it falls as segments shrink.
TEST(MemoryPlanTest, ActivationPeakEqualsPredictionForEveryPolicy) {
  int64_t previous = INT64_MAX;
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{4}}) {
    Case c;
    c.segments = k == 0 ? std::nullopt : std::optional<int64_t>(k);
    const PlanInput in = plan_input(c);
    const MemoryPlan plan = plan_memory(in).value();
    const int64_t predicted = plan.at(Tier::kHost, MemCategory::kActivations);
    EXPECT_EQ(measure(in.engine, 1).peak[0][static_cast<int>(MemCategory::kActivations)], predicted) << k;
    if (k > 1) {
      EXPECT_LT(predicted, previous) << k << " segments";
    }
    if (k > 0) previous = predicted;
  }
}

TEST(MemoryPlanTest, RefusesWhatItCannotPlan) {
  PlanInput in;
  in.model = kModel;
  in.engine.activation_checkpointing.number_checkpoints = 5;
  EXPECT_NE(plan_memory(in).status().message().find("number_checkpoints"), std::string_view::npos);
  in.engine.activation_checkpointing.number_checkpoints.reset();
  in.rank = 1;
  EXPECT_FALSE(plan_memory(in).ok());
  in.rank = 0;
  // (A stage outside 0-3 cannot be written: EngineConfig holds a ZeroStage.)
  in.engine.zero.offload_optimizer.device = OffloadDevice::kNvme;  // refused by the config at stage 0
  EXPECT_NE(plan_memory(in).status().message().find("offload_optimizer"), std::string_view::npos);
}

// The public planner returns every model rule as a Status: a Llama with 2
// key/value heads over a tensor group of 4 (it aborted inside the model's
// constructor), and a vocabulary smaller than the tensor group.
TEST(MemoryPlanTest, ModelRulesOverTheTensorGroupAreStatuses) {
  PlanInput in;
  in.model = kModel;
  in.model.arch = ModelArch::kLlama;
  in.model.n_head = 4;
  in.model.n_kv_head = 2;
  in.world = 4;
  in.tensor = 4;
  absl::StatusOr<MemoryPlan> p = plan_memory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(p.status())) << p.status();
  EXPECT_NE(p.status().message().find("is more than the model's 2 key/value heads"), std::string_view::npos)
      << p.status();
  in.model = kModel;
  in.model.vocab_size = 1;
  in.world = 2;
  in.tensor = 2;
  p = plan_memory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("is more than model.vocab_size 1"), std::string_view::npos) << p.status();
}

// ZeRO-Offload on a device backend: the optimizer state moves from device to
// host memory, beside the host step's pinned staging; at stage 3 with
// offload_param "cpu" the parameter shard moves too. What the path does not
// run is refused as the engine refuses it.
TEST(MemoryPlanTest, CpuOffloadOnADeviceMovesStateToHostMemory) {
  PlanInput in;
  in.model = kModel;
  in.compute_tier = Tier::kDevice;
  in.engine.param_dtype = DType::kBF16;
  in.engine.zero.stage = ZeroStage::k2;
  in.world = 2;
  in.engine.zero.sub_group_size = 10000;
  const MemoryPlan resident = plan_memory(in).value();
  in.engine.zero.offload_optimizer.device = OffloadDevice::kCpu;
  const MemoryPlan offloaded = plan_memory(in).value();
  const int64_t part = resident.partition_numel;
  EXPECT_EQ(resident.at(Tier::kDevice, MemCategory::kOptimizerState), 12 * part);
  EXPECT_EQ(offloaded.at(Tier::kDevice, MemCategory::kOptimizerState), 0);
  EXPECT_EQ(offloaded.at(Tier::kHost, MemCategory::kOptimizerState), 12 * part);
  const int64_t chunk = std::min<int64_t>(10000, part);
  EXPECT_EQ(offloaded.at(Tier::kHost, MemCategory::kCommBuffers), 2 * chunk * (2 + 2));
  EXPECT_EQ(offloaded.at(Tier::kDevice, MemCategory::kParameters), resident.at(Tier::kDevice, MemCategory::kParameters));

  in.engine.zero.stage = ZeroStage::k3;
  in.engine.zero.param_persistence_threshold = 0;  // nothing gathered at rest
  in.engine.zero.offload_param.device = OffloadDevice::kCpu;
  const MemoryPlan params = plan_memory(in).value();
  EXPECT_EQ(params.after_init[static_cast<int>(Tier::kDevice)][static_cast<int>(MemCategory::kParameters)], 0);
  EXPECT_EQ(params.at(Tier::kHost, MemCategory::kParameters), 2 * params.partition_numel);
  EXPECT_EQ(params.at(Tier::kHost, MemCategory::kCommBuffers),
            2 * std::min<int64_t>(10000, params.partition_numel) * 2);  // gradients only

  in.engine.zero.offload_optimizer.device = OffloadDevice::kNone;
  EXPECT_NE(plan_memory(in).status().message().find("offload_param.device \"cpu\" needs offload_optimizer"),
            std::string_view::npos);
  in.engine.zero.stage = ZeroStage::k0;
  in.engine.zero.offload_param.device = OffloadDevice::kNone;
  in.engine.zero.offload_optimizer.device = OffloadDevice::kCpu;
  EXPECT_NE(plan_memory(in).status().message().find("stage 1, 2 or 3"), std::string_view::npos);
  in.compute_tier = Tier::kHost;  // the CPU backend: "cpu" moves nothing
  EXPECT_TRUE(plan_memory(in).ok());
}

TEST(MemoryPlanTest, NvmeOffloadMovesOptimizerStateToSwapFiles) {
  PlanInput in;
  in.model = kModel;
  in.engine.param_dtype = DType::kBF16;
  in.engine.zero.stage = ZeroStage::k2;
  in.world = 2;
  in.engine.zero.sub_group_size = 10000;
  const MemoryPlan host = plan_memory(in).value();
  in.engine.zero.offload_optimizer.device = OffloadDevice::kNvme;
  const MemoryPlan nvme = plan_memory(in).value();
  const SwapLayout layout = SwapLayout::make(host.partition_numel, 10000, 3);
  EXPECT_EQ(nvme.at(Tier::kHost, MemCategory::kOptimizerState), 0);
  EXPECT_EQ(nvme.at(Tier::kNvme, MemCategory::kOptimizerState), layout.file_bytes());
  EXPECT_EQ(nvme.at(Tier::kHost, MemCategory::kSwapBuffers), layout.buffer_bytes(4));
  EXPECT_EQ(host.at(Tier::kHost, MemCategory::kOptimizerState), 12 * host.partition_numel);
  EXPECT_EQ(nvme.at(Tier::kHost, MemCategory::kParameters), host.at(Tier::kHost, MemCategory::kParameters));
}

}  // namespace
}  // namespace zero
