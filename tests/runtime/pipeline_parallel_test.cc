// Pipeline parallelism composed with tensor parallelism and ZeRO over the
// data group: a GPT of 4 layers on a mesh of P pipeline x T tensor x D data
// ranks trains what one rank trains on the same global batch. Under mpirun
// with W ranks the layouts with P x T x D = W, P in {2, 4}, T in {1, 2}, D in
// {1, 2} run (W = 2, 4, 8 cover all seven), each under 1F1B and GPipe, at
// ZeRO stages 0, 1 and 2; gradient_accumulation_steps 4 micro-batches.
//
// Per layout, schedule and stage, over 20 steps of SGD with momentum:
//  * the loss matches one rank's within 1e-5 relative, the gradient norm
//    within 5e-5 (1e-6 at step 1), on every rank (the last stage's loss and
//    the norm over all stages reach every rank);
//  * parameters are bitwise identical across the data replicas, and the token
//    table's two copies (first stage, last stage's tied head) bitwise equal;
//  * every stage's fp32 master weights, reassembled from the tensor slices,
//    match one rank's for the same names within 1e-5 of the largest;
//  * the forwards and backwards each stage ran are the schedule's order;
//  * with P ranks alone (no data or tensor group) a step sends exactly the
//    schedule's activations and gradients and the tied table's all-reduce.
// The same with every block checkpointed, and with dropout 0.1
// (PipelineCompositionTest); for Llama (PipelineLlamaTest) and Qwen2, Qwen3
// and Gemma (PipelineFamiliesTest). With fp16 from a loss scale of 2^30 every stage
// skips the steps one rank skips, at the same scales (PipelineFp16Test).
// The schedule itself (PipelineScheduleOrder): P = 4, M = 8 under 1F1B is
// the order written out by hand, and the activations alive on a stage (the
// tracker's peak) hold at most min(P - s, M) micro-batches, where GPipe's
// hold M.
//
// Evaluation (PipelineEvaluationTest): Engine::evaluate on every rank of each
// layout, at ZeRO stages 0-2, gives one rank's loss of the same held-out rows
// within 1e-5 relative, before and after training steps; it leaves no
// activations behind, and steps around it lose what steps without it lose,
// bit for bit; a batch the last stage cannot score fails on every stage
// (none waits), and the next evaluation is as before.
//
// Checkpoints (PipelineCheckpointTest): a run on a pipeline layout saves
// after step 5 (each stage its own parameters, the token table once, from
// the first stage); the checkpoint resumes on one rank without a pipeline and
// over the world as other layouts (other P, T, ZeRO stage and schedule), and
// steps 6-10 lose what the uninterrupted run lost within 1e-5; consolidated,
// it is a one-rank checkpoint's safetensors file (names, shapes), its values
// within 1e-5 of the largest.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "comm/device_mesh.h"
#include "core/memory_tracker.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/gathered_hash.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/same_model_file.h"

namespace zero {
namespace {

using testing::gathered_hash;
using testing::same_everywhere;
using testing::world;

const GptConfig kModel{.n_layer = 4, .n_head = 4, .d_model = 16, .vocab_size = 37, .seq_len = 8};
constexpr int64_t kGlobalBatch = 24;
constexpr int kMicroBatches = 4;
constexpr int kSteps = 20;
const OptimizerConfig kSgd{.type = OptimizerType::kSGD, .lr = 0.1f, .weight_decay = 0.01f, .momentum = 0.9f};

struct Layout {
  int pipeline = 1, tensor = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int stage = 0;  // ZeRO
  int micro_batches = kMicroBatches;
  int64_t global_batch = kGlobalBatch;
  bool fp16 = false;  // dynamic loss scaling from 2^30: the first steps overflow
  int64_t interval = 0;  // pipeline.activation_checkpoint_interval
  float dropout = 0.0f;
  std::optional<GptConfig> model;  // unset: kModel (GPT-2)
  std::string name() const {
    return cat("P=", pipeline, " T=", tensor, " D=", world().world_size() / (pipeline * tensor), " ",
               pipeline_schedule_name(schedule), " ZeRO-", stage);
  }
};

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<bool> skipped;
  std::vector<double> loss_scales;
  std::map<std::string, std::vector<float>> master;  // this rank's stage's, reassembled over the tensor group
  bool data_replicas_identical = true, tied_copies_identical = true, order_as_scheduled = true;
  int64_t activation_peak = 0;  // bytes, over the last step
  int64_t comm_bytes_first_step = -1;  // StepResult::comm_bytes of step 1
};

struct Checkpointing {
  std::string save_dir;  // saves after step save_after
  int save_after = 0;
  std::string resume_dir;  // resumes from its latest checkpoint first
};

// This rank's stage of the layout's model on `mesh`, its engine configured
// as the layout says.
absl::StatusOr<std::unique_ptr<Engine>> make_engine(const DeviceMesh& mesh, const Layout& l, Backend& backend) {
  const int data_size = mesh.shape().data;
  EngineConfig ec;
  ec.zero.stage = zero_stage(l.stage);
  ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = 500;
  ec.zero.sub_group_size = 1000;
  ec.gradient_accumulation_steps = l.micro_batches;
  ec.micro_batch_size = l.global_batch / (data_size * l.micro_batches);
  ec.pre_divide = data_size;
  ec.optimizer = kSgd;
  ec.gradient_clipping = 1.0f;
  ec.pipeline.stages = l.pipeline;
  ec.pipeline.schedule = l.schedule;
  ec.pipeline.activation_checkpoint_interval = l.interval;
  if (l.fp16) {
    ec.param_dtype = DType::kF16;
    ec.check_grad_overflow = true;
    ec.loss_scaler = {.dynamic = true, .initial_scale_power = 30, .scale_window = 1000, .hysteresis = 1};
  }
  GptConfig model = l.model ? *l.model : kModel;
  absl::StatusOr<PipelineStage> stage =
      gpt_pipeline_stage(model, mesh.coordinates().pipeline, l.pipeline, PartitionMethod::kUniform);
  if (!stage.ok()) return stage.status();
  model.dropout = l.dropout;
  return Engine::create(std::make_unique<Gpt>(model, &mesh.tensor(), false, *stage), ec, backend, mesh);
}

// One optimizer step of `l` on the global rows of step `step`, this data rank's share.
absl::StatusOr<StepResult> train_step(Engine& engine, const Layout& l, int step, testing::CountingRows& rows) {
  const int data_size = engine.mesh().shape().data, data_rank = engine.mesh().coordinates().data;
  const int64_t mb = engine.config().micro_batch_size;
  return engine.train_batch([&](int micro) -> absl::StatusOr<Batch> {
    return rows.make(((int64_t{step} * l.micro_batches + micro) * data_size + data_rank) * mb, mb);
  });
}

// The mesh of layout `l` over `comm` and the engine on it (both null, with a
// test failure, when either cannot be made). `backend` must outlive them.
struct Built {
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<Engine> engine;
};
Built build(Communicator& comm, const Layout& l, CpuBackend& backend) {
  absl::StatusOr<std::unique_ptr<DeviceMesh>> m = DeviceMesh::create(comm, l.tensor, l.pipeline);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  absl::StatusOr<std::unique_ptr<Engine>> e = make_engine(**m, l, backend);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  return {*std::move(m), *std::move(e)};
}

// `comm`: the world, or a communicator of one rank for the reference.
RunResult train(Communicator& comm, const Layout& l, int steps = kSteps, const Checkpointing& ck = {}) {
  RunResult out;
  CpuBackend backend;
  const Built built = build(comm, l, backend);
  if (built.engine == nullptr) return out;
  const DeviceMesh& mesh = *built.mesh;
  Engine& engine = *built.engine;
  testing::CountingRows rows{kModel.seq_len, kModel.vocab_size, {}, {}};
  const std::vector<PipeInstruction> scheduled =
      pipeline_compute_order(l.schedule, l.pipeline, mesh.coordinates().pipeline, l.micro_batches);
  if (!ck.resume_dir.empty()) {
    const absl::Status loaded = load_checkpoint(engine, ck.resume_dir);
    EXPECT_TRUE(loaded.ok()) << loaded;
    if (!loaded.ok()) return out;
  }
  for (int step = static_cast<int>(engine.global_step()); step < steps; ++step) {
    MemoryTracker::global().reset_peaks();
    absl::StatusOr<StepResult> r = train_step(engine, l, step, rows);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.activation_peak = MemoryTracker::global().snapshot().at(Tier::kHost, MemCategory::kActivations).peak;
    out.losses.push_back(r->loss);
    out.norms.push_back(r->grad_norm);
    out.skipped.push_back(r->skipped);
    if (step == 0) out.comm_bytes_first_step = r->comm_bytes;
    out.loss_scales.push_back(r->loss_scale);
    out.order_as_scheduled = out.order_as_scheduled && engine.executed_order() == scheduled;
    out.data_replicas_identical = out.data_replicas_identical &&
                                  same_everywhere(mesh.data(), gathered_hash(engine, engine.model().parameters()));
    if (Communicator* tied = mesh.embedding()) {
      const uint64_t h = gathered_hash(engine, model_of(engine.model()).parameters_tied_across_stages());
      out.tied_copies_identical = out.tied_copies_identical && same_everywhere(*tied, h);
    }
    if (!ck.save_dir.empty() && step + 1 == ck.save_after) {
      const absl::StatusOr<std::string> saved = save_checkpoint(engine, SaveOptions{ck.save_dir, "", 0});
      EXPECT_TRUE(saved.ok()) << saved.status();
    }
  }
  out.master = testing::full_master_weights(engine, mesh.tensor());
  return out;
}

const RunResult& reference() {
  static const RunResult ref = [] {
    const std::unique_ptr<Communicator> own = make_local_communicator();
    return train(*own, Layout{});
  }();
  return ref;
}

// The (P, T) with P x T x D = W, P in {2, 4}, T in {1, 2}, D in {1, 2}.
std::vector<std::pair<int, int>> layouts() {
  std::vector<std::pair<int, int>> out;
  for (int p : {2, 4})
    for (int t : {1, 2})
      for (int d : {1, 2})
        if (p * t * d == world().world_size()) out.push_back({p, t});
  return out;
}

void expect_matches(const RunResult& got, const RunResult& ref, const std::string& what) {
  testing::expect_same_trajectory(got.losses, got.norms, ref.losses, ref.norms, what);
  EXPECT_TRUE(got.data_replicas_identical) << what << ": parameters differ across data replicas";
  EXPECT_TRUE(got.tied_copies_identical) << what << ": the token table's copies differ between first and last stage";
  EXPECT_TRUE(got.order_as_scheduled) << what << ": forwards and backwards ran out of the schedule's order";
  testing::expect_same_weights(got.master, ref.master, what);  // this stage's tensors
}

class PipelineParallelTest : public ::testing::TestWithParam<std::tuple<int, PipelineScheduleKind>> {};

TEST_P(PipelineParallelTest, MatchesOneRankOnTheSameGlobalBatch) {
  const auto [stage, schedule] = GetParam();
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  for (const auto& [p, t] : layouts()) {
    const Layout l{.pipeline = p, .tensor = t, .schedule = schedule, .stage = stage};
    const RunResult got = train(world(), l);
    expect_matches(got, reference(), l.name());
    // Without data or tensor groups a step moves exactly the schedule's
    // transfers: M activations [B, S, C] forward from every stage but the
    // last, M gradients back from every stage but the first, and the
    // all-reduce of the token table's gradient between the end stages.
    if (world().world_size() == p) {
      const int s = world().rank();
      const int64_t activation = kGlobalBatch / kMicroBatches * kModel.seq_len * kModel.d_model * 4;
      const int64_t expected = kMicroBatches * activation * ((s < p - 1) + (s > 0)) +
                               (s == 0 || s == p - 1 ? kModel.vocab_size * kModel.d_model * 4 : 0);
      if (stage == 0) EXPECT_EQ(got.comm_bytes_first_step, expected) << l.name() << " stage " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, PipelineParallelTest,
                         ::testing::Combine(::testing::Values(0, 1, 2),
                                            ::testing::Values(PipelineScheduleKind::k1F1B,
                                                              PipelineScheduleKind::kGPipe)),
                         [](const auto& info) {
                           return cat("Zero", std::get<0>(info.param), "_",
                                      pipeline_schedule_name(std::get<1>(info.param)));
                         });

// Checkpointing every block of each stage (pipeline.activation_checkpoint_interval
// 1), and dropout 0.1 (masks keyed by the global sample, whatever the stage
// and micro-batch): still one rank's losses and weights.
TEST(PipelineCompositionTest, CheckpointingAndDropoutMatchOneRank) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  const std::unique_ptr<Communicator> own = make_local_communicator();
  const RunResult with_dropout = train(*own, Layout{.dropout = 0.1f});
  for (const auto& [p, t] : layouts()) {
    const Layout checkpointed{.pipeline = p, .tensor = t, .stage = 2, .interval = 1};
    expect_matches(train(world(), checkpointed), reference(), checkpointed.name() + ", every block checkpointed");
    const Layout dropout{.pipeline = p, .tensor = t, .schedule = PipelineScheduleKind::kGPipe, .stage = 1,
                         .dropout = 0.1f};
    expect_matches(train(world(), dropout), with_dropout, dropout.name() + ", dropout 0.1");
  }
}

// The Llama family in stages: the embedding on the first, the RMSNorm and
// the head on the last (untied: its own table, nothing to sum between the
// end stages; tied: the table's copy, as GPT-2's), composed with tensor
// parallelism of its grouped heads.
TEST(PipelineLlamaTest, TiedAndUntiedMatchOneRank) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  const std::unique_ptr<Communicator> own = make_local_communicator();
  for (bool tied : {false, true}) {
    const GptConfig llama{.arch = ModelArch::kLlama, .n_layer = 4, .n_head = 4, .d_model = 16, .vocab_size = 37,
                          .seq_len = 8, .n_kv_head = 2, .d_ff = 24, .tie_word_embeddings = tied};
    const RunResult ref = train(*own, Layout{.model = llama});
    for (const auto& [p, t] : layouts()) {
      const Layout l{.pipeline = p, .tensor = t, .stage = 1, .model = llama};
      expect_matches(train(world(), l), ref, l.name() + (tied ? ", Llama tied" : ", Llama untied"));
    }
  }
}

// Qwen2 (untied head), Qwen3 and Gemma (tied, its table's copy on the last
// stage; Gemma's embedding scale on the first) in stages, composed with
// tensor parallelism; Qwen3's and Gemma's heads of their own width.
TEST(PipelineFamiliesTest, QwenAndGemmaMatchOneRank) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  const std::unique_ptr<Communicator> own = make_local_communicator();
  for (const ModelArch arch : {ModelArch::kQwen2, ModelArch::kQwen3, ModelArch::kGemma}) {
    GptConfig model{.arch = arch, .n_layer = 4, .n_head = 4, .d_model = 16, .vocab_size = 37, .seq_len = 8,
                    .n_kv_head = 2, .d_ff = 24, .tie_word_embeddings = arch != ModelArch::kQwen2};
    if (arch != ModelArch::kQwen2) model.d_head = 8;
    const RunResult ref = train(*own, Layout{.model = model});
    for (const auto& [p, t] : layouts()) {
      const Layout l{.pipeline = p, .tensor = t, .stage = 1, .model = model};
      expect_matches(train(world(), l), ref, cat(l.name(), ", ", model.family_name()));
    }
  }
}

// fp16 from a loss scale of 2^30: the gradients overflow on some stage in
// the first steps, and every stage skips the same steps (the overflow flag
// is agreed over the world) with the same scales as one rank, whose losses
// the run then follows within fp16's rounding.
TEST(PipelineFp16Test, EveryStageSkipsTheStepsOneRankSkips) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  const std::unique_ptr<Communicator> own = make_local_communicator();
  const RunResult ref = train(*own, Layout{.fp16 = true}, 12);
  ASSERT_EQ(ref.skipped.size(), 12u);
  ASSERT_TRUE(ref.skipped[0]) << "2^30 should overflow fp16 at step 1";
  for (const auto& [p, t] : layouts()) {
    const Layout l{.pipeline = p, .tensor = t, .stage = 1, .fp16 = true};
    const RunResult got = train(world(), l, 12);
    ASSERT_EQ(got.skipped.size(), 12u) << l.name();
    EXPECT_EQ(got.skipped, ref.skipped) << l.name();
    EXPECT_EQ(got.loss_scales, ref.loss_scales) << l.name();
    for (size_t s = 0; s < 12; ++s) EXPECT_NEAR(got.losses[s], ref.losses[s], 2e-3 * ref.losses[s]) << l.name() << " step " << s + 1;
  }
}

// Evaluation through the stages (Engine::evaluate with P > 1).
struct EvalResult {
  std::vector<double> val;            // before step 1, after step 1, after step 2
  std::vector<double> losses, norms;  // steps 1 and 2
  bool activations_unchanged = true;  // the tracker's activation bytes, before and after each evaluation
};

constexpr int64_t kValFirstRow = 1000;  // held-out rows: no step trains on them

// The mean loss over global rows [kValFirstRow, kValFirstRow + kGlobalBatch),
// each data rank evaluating its share (every target is valid, so the mean
// over the data group of the shares' means is the whole batch's).
absl::StatusOr<double> evaluate_rows(Engine& engine, testing::CountingRows& rows) {
  Communicator& data = engine.mesh().data();
  const int64_t share = kGlobalBatch / data.world_size();
  absl::StatusOr<float> mean = engine.evaluate(rows.make(kValFirstRow + data.rank() * share, share));
  if (!mean.ok()) return mean.status();
  absl::StatusOr<double> sum = data.all_reduce_sum(*mean);
  if (!sum.ok()) return sum.status();
  return *sum / data.world_size();
}

// Two steps of `l`, evaluating before, between and after them when `evaluate`.
// With a pipeline, last, a batch whose targets the last stage's logits do not
// fit: every rank fails (the last stage with that error, the others naming
// it) and none waits; the evaluation after it is again the last one's.
EvalResult evaluate_and_train(Communicator& comm, const Layout& l, bool evaluate) {
  EvalResult out;
  CpuBackend backend;
  const Built built = build(comm, l, backend);
  if (built.engine == nullptr) return out;
  const DeviceMesh& mesh = *built.mesh;
  Engine& engine = *built.engine;
  testing::CountingRows rows{kModel.seq_len, kModel.vocab_size, {}, {}};
  testing::CountingRows val_rows{kModel.seq_len, kModel.vocab_size, {}, {}};
  auto activation_bytes = [] {
    return MemoryTracker::global().snapshot().at(Tier::kHost, MemCategory::kActivations).current;
  };
  auto eval = [&] {
    if (!evaluate) return;
    const int64_t before = activation_bytes();
    absl::StatusOr<double> v = evaluate_rows(engine, val_rows);
    EXPECT_TRUE(v.ok()) << l.name() << ": " << v.status();
    out.val.push_back(v.ok() ? *v : -1.0);
    out.activations_unchanged = out.activations_unchanged && activation_bytes() == before;
  };
  eval();
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<StepResult> r = train_step(engine, l, step, rows);
    EXPECT_TRUE(r.ok()) << l.name() << ": " << r.status();
    if (!r.ok()) return out;
    out.losses.push_back(r->loss);
    out.norms.push_back(r->grad_norm);
    eval();
  }
  if (evaluate && l.pipeline > 1) {
    const int stage = mesh.coordinates().pipeline;
    const bool last = stage == l.pipeline - 1;
    Batch bad = val_rows.make(kValFirstRow, 2);
    if (last) bad.targets = Tensor::wrap(val_rows.targets.data(), {1, kModel.seq_len}, DType::kI32);
    const absl::StatusOr<float> failed = engine.evaluate(bad);
    EXPECT_FALSE(failed.ok()) << l.name() << " stage " << stage;
    if (!failed.ok() && last) {
      EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument) << failed.status();
      EXPECT_NE(failed.status().message().find("8 targets [1, 8] for 16 rows of logits"), std::string::npos)
          << failed.status();
    } else if (!failed.ok()) {
      EXPECT_NE(failed.status().message().find(cat("pipeline stage(s) ", l.pipeline - 1, " failed")),
                std::string::npos)
          << failed.status();
    }
    const size_t evaluated = out.val.size();
    eval();
    if (out.val.size() == evaluated + 1) EXPECT_EQ(out.val.back(), out.val[evaluated - 1]) << l.name();
    out.val.pop_back();
  }
  return out;
}

// Every rank of a pipeline layout (P x T x D as the world allows, ZeRO 0-2,
// dropout 0.1 in training) gets one rank's evaluation loss of the same rows
// within 1e-5 relative, before training and after each of two steps (the
// updated weights of every stage, the tied head's too); evaluating holds no
// activations afterwards; and two steps with evaluations around them lose
// what two steps without lose, with the same gradient norms, bit for bit (no
// gradient, optimizer state, micro-step or dropout key moved).
TEST(PipelineEvaluationTest, EveryStageGetsOneRanksLossAndTrainingIsUnchanged) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  const std::unique_ptr<Communicator> own = make_local_communicator();
  const EvalResult ref = evaluate_and_train(*own, Layout{.dropout = 0.1f}, true);
  ASSERT_EQ(ref.val.size(), 3u);
  EXPECT_LT(ref.val[2], ref.val[0]) << "held-out rows of the pattern: the loss falls as the model learns";
  EXPECT_TRUE(ref.activations_unchanged);
  for (const auto& [p, t] : layouts()) {
    for (int zero_stage : {0, 1, 2}) {
      const Layout l{.pipeline = p, .tensor = t, .stage = zero_stage, .dropout = 0.1f};
      const EvalResult with = evaluate_and_train(world(), l, true);
      const EvalResult without = evaluate_and_train(world(), l, false);
      const std::string what = l.name() + " rank " + std::to_string(world().rank());
      // EXPECT, not ASSERT: a rank that left early would leave the others waiting in the next layout's collectives.
      EXPECT_EQ(with.val.size(), 3u) << what;
      for (size_t i = 0; i < 3 && i < with.val.size(); ++i)
        EXPECT_NEAR(with.val[i], ref.val[i], 1e-5 * ref.val[i]) << what << " eval " << i;
      EXPECT_TRUE(with.activations_unchanged) << what << ": evaluation left activations behind";
      EXPECT_EQ(with.losses.size(), 2u) << what;
      EXPECT_EQ(without.losses.size(), 2u) << what;
      for (size_t i = 0; i < 2 && i < with.losses.size() && i < without.losses.size(); ++i) {
        EXPECT_EQ(with.losses[i], without.losses[i]) << what << " step " << i + 1;
        EXPECT_EQ(with.norms[i], without.norms[i]) << what << " step " << i + 1;
        EXPECT_NEAR(with.losses[i], ref.losses[i], 1e-5 * ref.losses[i]) << what << " step " << i + 1;
      }
    }
  }
}

TEST(PipelineScheduleOrder, OneForwardOneBackwardAsWrittenOut) {
  const char* want[4] = {
      "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
      "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
      "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
  };
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(describe(pipeline_compute_order(PipelineScheduleKind::k1F1B, 4, s, 8)), want[s]) << "stage " << s;
    EXPECT_EQ(max_micro_batches_in_flight(pipeline_compute_order(PipelineScheduleKind::k1F1B, 4, s, 8)), 4 - s);
    EXPECT_EQ(max_micro_batches_in_flight(pipeline_compute_order(PipelineScheduleKind::kGPipe, 4, s, 8)), 8);
  }
  // Fewer micro-batches than stages: everything warms up, nothing steadies.
  EXPECT_EQ(describe(pipeline_compute_order(PipelineScheduleKind::k1F1B, 4, 0, 2)), "F0 F1 B0 B1");
  // The transfers: a send and the next receive with the same neighbour are one exchange.
  EXPECT_EQ(describe(pipeline_instructions(PipelineScheduleKind::k1F1B, 2, 0, 3)),
            "F0 send-act0 F1 send-act1/recv-grad0 B0 F2 send-act2/recv-grad1 B1 recv-grad2 B2");
  EXPECT_EQ(describe(pipeline_instructions(PipelineScheduleKind::k1F1B, 2, 1, 3)),
            "recv-act0 F0 B0 send-grad0/recv-act1 F1 B1 send-grad1/recv-act2 F2 B2 send-grad2");
  EXPECT_DOUBLE_EQ(ideal_bubble_fraction(4, 8), 3.0 / 11.0);
}

// The tracker's activation peak on each stage: 1F1B keeps at most
// min(P - s, M) micro-batches alive, GPipe all M. A (one micro-batch's
// activations on this stage) is read off GPipe at M = P and M = 2P; a
// 1F1B peak at M = 2P is GPipe's at M = P with P - min(P - s, M) fewer
// micro-batches, within half a micro-batch (a send buffer in flight).
TEST(PipelineScheduleOrder, ActivationsAliveAtMostPMinusStageMicroBatches) {
  const int p = world().world_size() >= 4 ? 4 : world().world_size();
  if (p < 2 || world().world_size() % p != 0) GTEST_SKIP() << "needs 2 or 4 stages";
  // One sample per micro-batch on each data rank.
  const int d = world().world_size() / p;
  auto peak = [&](PipelineScheduleKind k, int m) {
    const Layout l{.pipeline = p, .schedule = k, .micro_batches = m, .global_batch = int64_t{m} * d};
    return static_cast<double>(train(world(), l, 1).activation_peak);
  };
  const double gpipe_p = peak(PipelineScheduleKind::kGPipe, p), gpipe_2p = peak(PipelineScheduleKind::kGPipe, 2 * p);
  const double one_f_one_b = peak(PipelineScheduleKind::k1F1B, 2 * p);
  const double a = (gpipe_2p - gpipe_p) / p;
  const int s = world().rank() / (world().world_size() / p);
  const int alive = std::min(p - s, 2 * p);
  EXPECT_GT(a, 0) << "stage " << s;
  EXPECT_NEAR(one_f_one_b, gpipe_p - (p - alive) * a, a / 2)
      << "stage " << s << ": 1F1B's peak should hold " << alive << " micro-batches (GPipe at M = " << p
      << " holds " << p << ", one is " << a << " bytes)";
}

TEST(PipelineCheckpointTest, SavedPerStageResumesInAnyLayoutAndConsolidatesAsOneRanks) {
  if (layouts().empty()) GTEST_SKIP() << "no pipeline layout at world " << world().world_size();
  const std::string dir = ::testing::TempDir() + "/pipeline_ckpt_np" + std::to_string(world().world_size());
  const auto [p, t] = layouts().back();
  const Layout saved{.pipeline = p, .tensor = t, .stage = 1};
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  ASSERT_TRUE(world().barrier().ok());
  const RunResult whole = train(world(), saved, 10, {.save_dir = dir + "/pp", .save_after = 5});
  ASSERT_EQ(whole.losses.size(), 10u);
  auto expect_continues = [&](const RunResult& resumed, const std::string& what) {
    ASSERT_EQ(resumed.losses.size(), 5u) << what;
    for (int s = 0; s < 5; ++s)
      EXPECT_NEAR(resumed.losses[s], whole.losses[5 + s], 1e-5 * whole.losses[5 + s]) << what << " step " << 6 + s;
  };
  {
    const std::unique_ptr<Communicator> own = make_local_communicator();
    expect_continues(train(*own, Layout{.stage = 0}, 10, {.resume_dir = dir + "/pp"}), "one rank, ZeRO-0");
  }
  // Other layouts of this world: every (P', T') it runs but the saving one, at ZeRO-2 under GPipe.
  for (const auto& [p2, t2] : layouts()) {
    if (p2 == p && t2 == t) continue;
    const Layout other{.pipeline = p2, .tensor = t2, .schedule = PipelineScheduleKind::kGPipe, .stage = 2};
    expect_continues(train(world(), other, 10, {.resume_dir = dir + "/pp"}), other.name());
  }
  // The same step on one rank, saved, and both consolidated.
  if (world().rank() == 0) {
    const std::unique_ptr<Communicator> own = make_local_communicator();
    train(*own, Layout{.stage = 0}, 5, {.save_dir = dir + "/one", .save_after = 5});
    ASSERT_TRUE(consolidate_to_safetensors(dir + "/pp", "global_step5", dir + "/pp.safetensors", DType::kF32).ok());
    ASSERT_TRUE(consolidate_to_safetensors(dir + "/one", "global_step5", dir + "/one.safetensors", DType::kF32).ok());
    testing::expect_same_model_file(dir + "/pp.safetensors", dir + "/one.safetensors");
  }
  ASSERT_TRUE(world().barrier().ok());
}

}  // namespace
}  // namespace zero
