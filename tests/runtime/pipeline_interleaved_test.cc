// Interleaved pipeline stages (pipeline.num_layers_per_virtual_stage): a GPT
// of 8 blocks on P stages of v chunks each trains what one rank trains on the
// same global batch. Under mpirun with W ranks the layouts with P x D = W,
// P in {2, 4}, D in {1, 2} run (W = 2: P 2; W = 4: P 2 x D 2 and P 4), at
// L = 1 and 2 blocks per virtual stage (P = 2: v = 4 and 2; P = 4: v = 2 and
// 1), ZeRO stages 0, 1 and 2, M = 4 micro-batches (8 with P = 4).
//
// Per layout, over 10 steps of SGD with momentum, as the plain pipeline's
// test asserts (tests/runtime/pipeline_parallel_test.cc, the same
// tolerances): the loss within 1e-5 relative of one rank's and the gradient
// norm within 5e-5 (1e-6 at step 1), on every rank; parameters bitwise equal
// across data replicas and the token table's copies (first stage's chunk 0,
// last stage's last chunk) bitwise equal; every stage's fp32 master weights
// within 1e-5 of one rank's by name; the forwards and backwards in the
// schedule's order, each (chunk, micro-batch) once; with P ranks alone a step
// sends exactly its schedule's transfers and the tied table's all-reduce.
// With L = n_layer / P (v = 1) the stage is the plain one, its order today's
// 1F1B. Also for Llama (tied head) and with every block checkpointed and
// dropout 0.1 (segments within each chunk; masks by global sample).
//
// Evaluation goes round the stages v times and gives one rank's loss.
// Checkpoints: a run saved after step 4 resumes, interleaved again or on one
// rank, and steps 5-8 lose what the uninterrupted run lost within 1e-5.
// Refusals: GPipe, M not a multiple of P, number_checkpoints, each an
// INVALID_ARGUMENT naming pipeline.num_layers_per_virtual_stage.
// Early receives (EarlyReceiveTest): over MPI, which allows them, training
// is bitwise the in-order program's (forced through a communicator that
// refuses them), interleaved and not, for at most one activation more.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "comm/device_mesh.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/build_model.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/config/run_config.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/gathered_hash.h"
#include "tests/testing/forwarding_communicator.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::gathered_hash;
using testing::same_everywhere;
using testing::world;

const GptConfig kModel{.n_layer = 8, .n_head = 4, .d_model = 16, .vocab_size = 37, .seq_len = 8};
constexpr int64_t kGlobalBatch = 48;
constexpr int kSteps = 10;
const OptimizerConfig kSgd{.type = OptimizerType::kSGD, .lr = 0.1f, .weight_decay = 0.01f, .momentum = 0.9f};

struct Layout {
  int pipeline = 1;
  int64_t per_virtual = 0;  // pipeline.num_layers_per_virtual_stage (0: unset)
  int stage = 0;            // ZeRO
  int micro_batches = 4;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int64_t interval = 0;  // pipeline.activation_checkpoint_interval
  float dropout = 0.0f;
  std::optional<GptConfig> model;
  int chunks() const { return per_virtual > 0 ? static_cast<int>(kModel.n_layer / (per_virtual * pipeline)) : 1; }
  std::string name() const {
    return cat("P=", pipeline, " v=", chunks(), " D=", world().world_size() / pipeline, " M=", micro_batches,
               " ZeRO-", stage);
  }
};

EngineConfig engine_config(const Layout& l, int data_size) {
  EngineConfig ec;
  ec.zero.stage = zero_stage(l.stage);
  ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = 500;
  ec.zero.sub_group_size = 1000;
  ec.gradient_accumulation_steps = l.micro_batches;
  ec.micro_batch_size = kGlobalBatch / (data_size * l.micro_batches);
  ec.pre_divide = data_size;
  ec.optimizer = kSgd;
  ec.gradient_clipping = 1.0f;
  ec.pipeline.stages = l.pipeline;
  ec.pipeline.schedule = l.schedule;
  ec.pipeline.activation_checkpoint_interval = l.interval;
  ec.pipeline.num_layers_per_virtual_stage = l.per_virtual;
  return ec;
}

struct Built {
  std::unique_ptr<DeviceMesh> mesh;
  std::unique_ptr<Engine> engine;
};
absl::StatusOr<Built> build(Communicator& comm, const Layout& l, Backend& backend,
                            std::optional<EngineConfig> config = std::nullopt) {
  Built b;
  ZE_ASSIGN_OR_RETURN(b.mesh, DeviceMesh::create(comm, 1, l.pipeline));
  GptConfig model = l.model ? *l.model : kModel;
  model.dropout = l.dropout;
  ZE_ASSIGN_OR_RETURN(std::unique_ptr<Gpt> gpt,
                      build_model(model, *b.mesh, {false, PartitionMethod::kUniform, l.per_virtual}));
  ZE_ASSIGN_OR_RETURN(b.engine, Engine::create(std::move(gpt), config ? *config : engine_config(l, b.mesh->shape().data),
                                               backend, *b.mesh));
  return b;
}

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<double> val;  // evaluation of held-out rows after each step (when asked)
  std::map<std::string, std::vector<float>> master;
  bool data_replicas_identical = true, tied_copies_identical = true, order_as_scheduled = true;
  int64_t comm_bytes_first_step = -1;
  int64_t activation_peak = 0;  // bytes, the highest of any step
  int chunks = 0;
};

struct Options {
  int steps = kSteps;
  bool evaluate = false;
  std::string save_dir;  // saves after step save_after
  int save_after = 0;
  std::string resume_dir;
};

constexpr int64_t kValFirstRow = 1000;

RunResult train(Communicator& comm, const Layout& l, const Options& o = {}) {
  RunResult out;
  CpuBackend backend;
  absl::StatusOr<Built> built = build(comm, l, backend);
  EXPECT_TRUE(built.ok()) << l.name() << ": " << built.status();
  if (!built.ok()) return out;
  const DeviceMesh& mesh = *built->mesh;
  Engine& engine = *built->engine;
  out.chunks = model_of(engine.model()).pipeline_chunks();
  const int data_size = mesh.shape().data, data_rank = mesh.coordinates().data;
  testing::CountingRows rows{kModel.seq_len, kModel.vocab_size, {}, {}};
  testing::CountingRows val_rows{kModel.seq_len, kModel.vocab_size, {}, {}};
  const std::vector<PipeInstruction> scheduled =
      l.pipeline > 1 ? pipeline_compute_order(l.schedule, l.pipeline, mesh.coordinates().pipeline, l.micro_batches,
                                              out.chunks)
                     : std::vector<PipeInstruction>{};
  if (!o.resume_dir.empty()) {
    const absl::Status loaded = load_checkpoint(engine, o.resume_dir);
    EXPECT_TRUE(loaded.ok()) << loaded;
    if (!loaded.ok()) return out;
  }
  const int64_t mb = engine.config().micro_batch_size;
  for (int step = static_cast<int>(engine.global_step()); step < o.steps; ++step) {
    MemoryTracker::global().reset_peaks();
    absl::StatusOr<StepResult> r = engine.train_batch([&](int micro) -> absl::StatusOr<Batch> {
      return rows.make(((int64_t{step} * l.micro_batches + micro) * data_size + data_rank) * mb, mb);
    });
    EXPECT_TRUE(r.ok()) << l.name() << ": " << r.status();
    if (!r.ok()) return out;
    out.losses.push_back(r->loss);
    out.norms.push_back(r->grad_norm);
    out.activation_peak = std::max(
        out.activation_peak, MemoryTracker::global().snapshot().at(Tier::kHost, MemCategory::kActivations).peak);
    if (out.comm_bytes_first_step < 0) out.comm_bytes_first_step = r->comm_bytes;
    if (l.pipeline > 1) out.order_as_scheduled = out.order_as_scheduled && engine.executed_order() == scheduled;
    out.data_replicas_identical = out.data_replicas_identical &&
                                  same_everywhere(mesh.data(), gathered_hash(engine, engine.model().parameters()));
    if (Communicator* tied = mesh.embedding()) {
      const uint64_t h = gathered_hash(engine, model_of(engine.model()).parameters_tied_across_stages());
      out.tied_copies_identical = out.tied_copies_identical && same_everywhere(*tied, h);
    }
    if (o.evaluate) {
      // Every data rank its share of the held-out rows; the mean of the means.
      const int64_t share = kGlobalBatch / data_size;
      absl::StatusOr<float> v = engine.evaluate(val_rows.make(kValFirstRow + data_rank * share, share));
      EXPECT_TRUE(v.ok()) << l.name() << ": " << v.status();
      absl::StatusOr<double> sum = mesh.data().all_reduce_sum(v.ok() ? *v : 0.0);
      out.val.push_back(sum.ok() ? *sum / data_size : -1.0);
    }
    if (!o.save_dir.empty() && step + 1 == o.save_after) {
      const absl::StatusOr<std::string> saved = save_checkpoint(engine, SaveOptions{o.save_dir, "", 0});
      EXPECT_TRUE(saved.ok()) << saved.status();
    }
  }
  out.master = testing::full_master_weights(engine, mesh.tensor());
  return out;
}

const RunResult& reference(std::optional<GptConfig> model = std::nullopt, float dropout = 0.0f) {
  static std::map<std::string, RunResult> refs;
  const std::string key = cat(model ? model->family_name() : "gpt2", dropout);
  if (!refs.count(key)) {
    const std::unique_ptr<Communicator> own = make_local_communicator();
    refs[key] = train(*own, Layout{.dropout = dropout, .model = model}, {.evaluate = true});
  }
  return refs[key];
}

// The (P, L) the world runs: P x D = W, D in {1, 2}; L in {1, 2}.
std::vector<Layout> layouts(int zero_stage) {
  std::vector<Layout> out;
  for (int p : {2, 4})
    for (int d : {1, 2})
      if (p * d == world().world_size())
        for (int64_t per : {1, 2}) out.push_back({.pipeline = p, .per_virtual = per, .stage = zero_stage,
                                                  .micro_batches = p == 4 ? 8 : 4});
  return out;
}

void expect_matches(const RunResult& got, const RunResult& ref, const std::string& what) {
  testing::expect_same_trajectory(got.losses, got.norms, ref.losses, ref.norms, what);
  EXPECT_TRUE(got.data_replicas_identical) << what << ": parameters differ across data replicas";
  EXPECT_TRUE(got.tied_copies_identical) << what << ": the token table's copies differ between first and last stage";
  EXPECT_TRUE(got.order_as_scheduled) << what << ": forwards and backwards ran out of the schedule's order";
  testing::expect_same_weights(got.master, ref.master, what);
}

class InterleavedPipelineTest : public ::testing::TestWithParam<int> {};

TEST_P(InterleavedPipelineTest, MatchesOneRankOnTheSameGlobalBatch) {
  for (const Layout& l : layouts(GetParam())) {
    const RunResult got = train(world(), l, {.evaluate = true});
    const std::string what = l.name() + " rank " + std::to_string(world().rank());
    EXPECT_EQ(got.chunks, l.chunks()) << what;
    expect_matches(got, reference(), what);
    ASSERT_EQ(got.val.size(), reference().val.size()) << what;
    for (size_t i = 0; i < got.val.size(); ++i)
      EXPECT_NEAR(got.val[i], reference().val[i], 1e-5 * reference().val[i]) << what << " evaluation " << i + 1;
    // Alone on the pipeline (no data group), a step moves the schedule's
    // sends, [B, S, C] each, and the token table's gradient between the end stages.
    if (world().world_size() == l.pipeline && GetParam() == 0) {
      const int s = world().rank();
      int sends = 0;
      for (const PipeInstruction& in : pipeline_instructions(l.schedule, l.pipeline, s, l.micro_batches, l.chunks()))
        sends += in.op == PipeOp::kSendActivation || in.op == PipeOp::kSendGrad ||
                 in.op == PipeOp::kSendActivationRecvGrad || in.op == PipeOp::kSendGradRecvActivation;
      // Every chunk sends M activations (but the last virtual stage) and M gradients (but virtual stage 0).
      EXPECT_EQ(sends, l.micro_batches * (2 * l.chunks() - (s == 0) - (s == l.pipeline - 1))) << what;
      const int64_t activation = kGlobalBatch / l.micro_batches * kModel.seq_len * kModel.d_model * 4;
      const int64_t tied = s == 0 || s == l.pipeline - 1 ? kModel.vocab_size * kModel.d_model * 4 : 0;
      EXPECT_EQ(got.comm_bytes_first_step, sends * activation + tied) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, InterleavedPipelineTest, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return cat("Zero", info.param); });

// A communicator that runs everything through `inner` but does not allow
// early receives, so the engine over it runs the in-order program (as over
// NCCL). Groups split from it are wrapped alike.
class InOrderReceives final : public testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  bool allows_early_receives() const override { return false; }
  absl::StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override {
    ZE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> group, inner().split(color, key));
    return std::unique_ptr<Communicator>(std::make_unique<InOrderReceives>(std::move(group)));
  }
};

// MPI allows early receives, so the engine posts each receive one compute
// ahead (pipeline_schedule.h); over the same ranks with the in-order program
// (InOrderReceives) every loss, gradient norm and master weight is bitwise
// the same, interleaved (P = 2: both directions between the same two
// stages) and not, and the activations' peak is at most one received
// activation higher (and the last stage's copy of the targets).
TEST(EarlyReceiveTest, TrainsBitwiseAsTheInOrderProgram) {
  if (world().world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  ASSERT_TRUE(world().allows_early_receives()) << world().name();
  std::vector<Layout> runs = layouts(1);
  runs.push_back({.pipeline = 2, .stage = 1});  // one chunk of 4 blocks per stage
  for (const Layout& l : runs) {
    const std::string what = l.name() + " rank " + std::to_string(world().rank());
    const RunResult early = train(world(), l, {.steps = 4});
    InOrderReceives in_order(world());
    const RunResult plain = train(in_order, l, {.steps = 4});
    ASSERT_EQ(early.losses.size(), 4u) << what;
    EXPECT_EQ(early.losses, plain.losses) << what;
    EXPECT_EQ(early.norms, plain.norms) << what;
    EXPECT_EQ(early.master, plain.master) << what;
    EXPECT_TRUE(early.order_as_scheduled && plain.order_as_scheduled) << what;
    // One [B, S, C] received activation more; on the last stage of one
    // chunk also the copy of the targets ([B, S] int32), as the next
    // micro-batch is drawn (at its receive) before this one's loss.
    const int64_t rows = kGlobalBatch / (world().world_size() / l.pipeline * l.micro_batches);
    const int stage = world().rank() / (world().world_size() / l.pipeline);
    const bool last_of_one_chunk = l.chunks() == 1 && stage == l.pipeline - 1;
    const int64_t extra = rows * kModel.seq_len * (kModel.d_model + (last_of_one_chunk ? 1 : 0)) * 4;
    EXPECT_LE(early.activation_peak, plain.activation_peak + extra) << what;
  }
}

// Llama with a tied head (the table's copy in the last stage's last chunk),
// and GPT-2 with every block checkpointed (segments within each chunk) and
// dropout 0.1: still one rank's.
TEST(InterleavedCompositionTest, LlamaCheckpointingAndDropoutMatchOneRank) {
  const GptConfig llama{.arch = ModelArch::kLlama, .n_layer = 8, .n_head = 4, .d_model = 16, .vocab_size = 37,
                        .seq_len = 8, .n_kv_head = 2, .d_ff = 24, .tie_word_embeddings = true};
  for (Layout l : layouts(1)) {
    if (l.chunks() < 2) continue;
    l.model = llama;
    expect_matches(train(world(), l, {.evaluate = true}), reference(llama), l.name() + ", Llama tied");
    l.model.reset();
    l.interval = 1;
    l.dropout = 0.1f;
    expect_matches(train(world(), l, {.evaluate = true}), reference(std::nullopt, 0.1f),
                   l.name() + ", every block checkpointed, dropout 0.1");
  }
}

TEST(InterleavedCheckpointTest, ResumesInterleavedAndOnOneRankAsIfUninterrupted) {
  const std::string dir = ::testing::TempDir() + "/interleaved_ckpt_np" + std::to_string(world().world_size());
  const Layout saved = layouts(1).front();  // P 2, v 4 (W = 2) or P 2 x D 2, v 4 (W = 4)
  ASSERT_GT(saved.chunks(), 1);
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  ASSERT_TRUE(world().barrier().ok());
  const RunResult whole = train(world(), saved, {.steps = 8, .save_dir = dir, .save_after = 4});
  ASSERT_EQ(whole.losses.size(), 8u);
  auto expect_continues = [&](const RunResult& resumed, const std::string& what) {
    ASSERT_EQ(resumed.losses.size(), 4u) << what;
    for (int s = 0; s < 4; ++s)
      EXPECT_NEAR(resumed.losses[s], whole.losses[4 + s], 1e-5 * whole.losses[4 + s]) << what << " step " << 5 + s;
  };
  expect_continues(train(world(), saved, {.steps = 8, .resume_dir = dir}), saved.name() + " resumed");
  Layout other = layouts(2).back();  // L = 2: P 2 v 2, or P 4 v 1
  expect_continues(train(world(), other, {.steps = 8, .resume_dir = dir}), other.name() + " resumed");
  const std::unique_ptr<Communicator> own = make_local_communicator();
  expect_continues(train(*own, Layout{}, {.steps = 8, .resume_dir = dir}), "one rank resumed");
  ASSERT_TRUE(world().barrier().ok());
}

TEST(InterleavedRefusalTest, GPipeOddMicroBatchesAndNumberCheckpointsNameTheKey) {
  const Layout l = layouts(0).front();
  CpuBackend backend;
  auto refused = [&](EngineConfig ec, const std::string& says) {
    absl::StatusOr<Built> b = build(world(), l, backend, ec);
    ASSERT_FALSE(b.ok()) << says;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
    EXPECT_NE(b.status().message().find("pipeline.num_layers_per_virtual_stage"), std::string::npos) << b.status();
    EXPECT_NE(b.status().message().find(says), std::string::npos) << b.status();
  };
  EngineConfig ec = engine_config(l, world().world_size() / l.pipeline);
  EngineConfig gpipe = ec;
  gpipe.pipeline.schedule = PipelineScheduleKind::kGPipe;
  refused(gpipe, "use schedule \"1f1b\"");
  EngineConfig odd = ec;
  odd.gradient_accumulation_steps = 3;
  refused(odd, "3 micro-batches (gradient_accumulation_steps) for 2 stages");
  EngineConfig numbered = ec;
  numbered.activation_checkpointing.number_checkpoints = 2;
  refused(numbered, "use pipeline.activation_checkpoint_interval");
  // The split itself: L x P must divide the blocks.
  const std::unique_ptr<DeviceMesh> mesh = DeviceMesh::create(world(), 1, l.pipeline).value();
  const absl::StatusOr<std::unique_ptr<Gpt>> odd_split = build_model(kModel, *mesh, {false, PartitionMethod::kUniform, 3});
  ASSERT_FALSE(odd_split.ok());
  EXPECT_NE(odd_split.status().message().find("pipeline.num_layers_per_virtual_stage: 3 x pipeline.stages 2 does not "
                                              "divide model.n_layer 8"),
            std::string::npos)
      << odd_split.status();
}

// The config key: read into the engine's pipeline section, and each rule
// refused naming it (parse_run_config at a world of 4 ranks, 2 stages).
TEST(InterleavedConfigTest, TheKeyIsReadAndItsRulesNameIt) {
  auto parse = [](const std::string& pipeline, int64_t accumulation = 4) {
    const std::string text = cat(R"({"train_batch_size": 32, "gradient_accumulation_steps": )", accumulation,
                                 R"(, "model": {"n_layer": 8}, "pipeline": {"stages": 2)", pipeline, "}}");
    absl::StatusOr<Json> j = parse_json_text(text, "test.json");
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? parse_run_config(*j, {.world_size = 4}) : absl::StatusOr<RunConfig>(j.status());
  };
  absl::StatusOr<RunConfig> ok = parse(R"(, "num_layers_per_virtual_stage": 2)");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->engine.pipeline.num_layers_per_virtual_stage, 2);
  EXPECT_EQ(parse("")->engine.pipeline.num_layers_per_virtual_stage, 0);
  auto error_of = [&](const std::string& pipeline, int64_t accumulation = 4) {
    absl::StatusOr<RunConfig> c = parse(pipeline, accumulation);
    EXPECT_FALSE(c.ok()) << pipeline;
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  const std::string odd = error_of(R"(, "num_layers_per_virtual_stage": 3)");
  EXPECT_NE(odd.find("pipeline.num_layers_per_virtual_stage: 3 x pipeline.stages 2 does not divide model.n_layer 8"),
            std::string::npos)
      << odd;
  const std::string gpipe = error_of(R"(, "num_layers_per_virtual_stage": 1, "schedule": "gpipe")");
  EXPECT_NE(gpipe.find("pipeline.num_layers_per_virtual_stage: 1 (4 model chunks per stage): 4 model chunks per "
                       "stage under schedule \"gpipe\""),
            std::string::npos)
      << gpipe;
  const std::string bad_m = [&] {
    absl::StatusOr<Json> j = parse_json_text(
        R"({"train_batch_size": 36, "gradient_accumulation_steps": 3, "model": {"n_layer": 8},
            "pipeline": {"stages": 2, "num_layers_per_virtual_stage": 2}})",
        "test.json");
    absl::StatusOr<RunConfig> c = parse_run_config(*j, {.world_size = 4});
    return c.ok() ? std::string() : std::string(c.status().message());
  }();
  EXPECT_NE(bad_m.find("pipeline.num_layers_per_virtual_stage: 2 (2 model chunks per stage): 3 micro-batches "
                       "(gradient_accumulation_steps) for 2 stages"),
            std::string::npos)
      << bad_m;
  absl::StatusOr<Json> one_stage =
      parse_json_text(R"({"train_batch_size": 8, "pipeline": {"num_layers_per_virtual_stage": 2}})", "test.json");
  absl::StatusOr<RunConfig> single = parse_run_config(*one_stage, {.world_size = 1});
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().message().find("pipeline.num_layers_per_virtual_stage: 2 with pipeline.stages 1"),
            std::string::npos)
      << single.status();
}

}  // namespace
}  // namespace zero
