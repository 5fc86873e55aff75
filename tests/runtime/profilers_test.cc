// DeepSpeed's flops_profiler and comms_logger as a user reads them. The
// profiler: the FLOPs a step's modules
// issue are the model's GEMM FLOPs exactly (counted from the GEMMs the step
// ran, checked against the GPT-2 formula), the backward is measured at twice
// the forward, the recompute of activation checkpointing shows up as its
// own phase with the blocks' forward FLOPs, a module's figures contain its
// children's, and zero-train prints (or writes) the report at profile_step on
// one rank and on a pipeline's stages, and says when profile_step is never
// reached. The logger: zero-train prints rank 0's summary at the end (and
// each op with verbose), records only prof_ops when prof_all is false, and
// refuses an op name it does not know, by key. And MFU against the CPU's
// ISA x clock peak when no peak is given (the GEMM rate a GPU run measures). (Its figures against the
// engine's byte counts: comms_logger_test.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/gpt.h"
#include "graph/module_profiler.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/config/run_config.h"
#include "runtime/engine/engine.h"
#include "runtime/tools/flops_profile_report.h"
#include "runtime/tools/gemm_rate.h"
#include "tests/testing/run_command.h"
#include "tests/testing/test_files.h"

namespace zero {
namespace {

constexpr int64_t kLayers = 2, kHeads = 2, kC = 32, kVocab = 96, kT = 16, kMicro = 2, kAccum = 2;

GptConfig tiny_gpt() {
  GptConfig g;
  g.n_layer = kLayers;
  g.n_head = kHeads;
  g.d_model = kC;
  g.vocab_size = kVocab;
  g.seq_len = kT;
  return g;
}

// One step (kAccum micro-batches of kMicro sequences) with the profiler attached.
struct Profiled {
  std::unique_ptr<Engine> engine;
  ModuleProfiler profiler;
};

void run_step(Engine& engine, int seed) {
  std::vector<int32_t> in(kMicro * kT), tg(kMicro * kT);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>((i * 7 + seed) % kVocab);
    tg[i] = static_cast<int32_t>((i * 11 + seed + 1) % kVocab);
  }
  const Batch batch{Tensor::wrap(in.data(), {kMicro, kT}, DType::kI32),
                    Tensor::wrap(tg.data(), {kMicro, kT}, DType::kI32)};
  ASSERT_TRUE(engine.train_batch([&](int) -> absl::StatusOr<Batch> { return batch; }).ok());
}

EngineConfig engine_config(bool checkpoint_every_block) {
  EngineConfig ec;
  ec.micro_batch_size = kMicro;
  ec.gradient_accumulation_steps = kAccum;
  if (checkpoint_every_block) ec.activation_checkpointing.number_checkpoints = kLayers;
  return ec;
}

// The model's forward GEMM FLOPs per token: 2 per weight element of every
// matmul (12 C^2 per block, the tied head's V C) plus attention's q k^T and
// P v over the whole T x T (unmasked, as the kernels compute them).
int64_t forward_flops_per_token() {
  return 2 * (12 * kC * kC * kLayers + kVocab * kC) + 4 * kLayers * kC * kT;
}

TEST(FlopsProfilerTest, CountsTheModelsGemmFlopsAndTheBackwardAtTwiceTheForward) {
  CpuBackend backend;
  auto engine = Engine::create(std::make_unique<Gpt>(tiny_gpt()), engine_config(false), backend).value();
  ModuleProfiler profiler(backend);
  engine->set_module_profiler(&profiler);
  run_step(*engine, 1);
  engine->set_module_profiler(nullptr);

  Module& root = engine->model();
  const ModuleProfile total = profiler.of(root);
  const int64_t tokens = kAccum * kMicro * kT;
  EXPECT_EQ(total.flops_of(ProfilePhase::kForward), tokens * forward_flops_per_token());
  EXPECT_EQ(total.flops_of(ProfilePhase::kBackward), 2 * total.flops_of(ProfilePhase::kForward));
  EXPECT_EQ(total.flops_of(ProfilePhase::kRecompute), 0);
  // Forward + backward is the 6 N + 12 L C T of the throughput line, but for
  // the parameters no GEMM multiplies (biases, norms, positions).
  const GptConfig g = tiny_gpt();
  // Per block: the four biases and two norms; then ln_f and wpe.
  const int64_t non_gemm = kLayers * (3 * kC + kC + 4 * kC + kC + 4 * kC) + 2 * kC + kT * kC;
  EXPECT_EQ(static_cast<double>(3 * total.flops_of(ProfilePhase::kForward)) / tokens,
            g.flops_per_token(kT) - 6.0 * static_cast<double>(non_gemm));
  EXPECT_EQ(total.calls_of(ProfilePhase::kForward), kAccum);
  EXPECT_EQ(total.calls_of(ProfilePhase::kBackward), kAccum);

  // A module's figures hold its children's: the root issues no GEMM itself.
  int64_t children_fwd = 0, children_bwd = 0;
  for (Module* child : root.children()) {
    const ModuleProfile p = profiler.of(*child);
    children_fwd += p.flops_of(ProfilePhase::kForward);
    children_bwd += p.flops_of(ProfilePhase::kBackward);
    EXPECT_LE(p.seconds_of(ProfilePhase::kForward), total.seconds_of(ProfilePhase::kForward)) << child->name();
    EXPECT_EQ(p.calls_of(ProfilePhase::kForward), kAccum) << child->name();
  }
  EXPECT_EQ(children_fwd, total.flops_of(ProfilePhase::kForward));
  EXPECT_EQ(children_bwd, total.flops_of(ProfilePhase::kBackward));
  EXPECT_GT(total.seconds_of(ProfilePhase::kForward), 0.0);
  EXPECT_GT(total.seconds_of(ProfilePhase::kBackward), 0.0);

  // The report: the summary's ratio, the repeated blocks summed as h.*, and
  // every module in the tree.
  FlopsProfileStep step;
  step.micro_batch = kMicro, step.accumulation = kAccum, step.seq_len = kT;
  step.model_parameters = step.rank_parameters = g.num_parameters();
  step.forward_s = step.backward_s = step.step_s = step.iter_s = 0.01;
  step.backend = "cpu";
  const std::string report = flops_profile_report(root, profiler, step, {});
  EXPECT_NE(report.find("(2.00 x fwd)"), std::string::npos) << report;
  EXPECT_NE(report.find("h.*:"), std::string::npos) << report;
  for (Module* m : root.modules()) {
    if (!m->name().empty()) EXPECT_NE(report.find(" " + m->name() + " "), std::string::npos) << m->name();
  }
  // module_depth 1 and no tree: no block's children listed.
  const std::string shallow = flops_profile_report(root, profiler, step, {1, 2, false});
  EXPECT_EQ(shallow.find("h.0.attn"), std::string::npos) << shallow;
  EXPECT_EQ(shallow.find("depth 2"), std::string::npos) << shallow;
  EXPECT_NE(shallow.find("depth 1"), std::string::npos) << shallow;
}

TEST(FlopsProfilerTest, CheckpointingShowsTheRecomputeAsItsOwnPhase) {
  CpuBackend backend;
  auto plain = Engine::create(std::make_unique<Gpt>(tiny_gpt()), engine_config(false), backend).value();
  auto ckpt = Engine::create(std::make_unique<Gpt>(tiny_gpt()), engine_config(true), backend).value();
  ASSERT_EQ(ckpt->num_checkpoint_segments(), static_cast<size_t>(kLayers));
  ModuleProfiler a(backend), b(backend);
  plain->set_module_profiler(&a);
  run_step(*plain, 3);
  ckpt->set_module_profiler(&b);
  run_step(*ckpt, 3);
  const ModuleProfile pa = a.of(plain->model()), pb = b.of(ckpt->model());
  EXPECT_EQ(pa.flops_of(ProfilePhase::kForward), pb.flops_of(ProfilePhase::kForward));
  EXPECT_EQ(pa.flops_of(ProfilePhase::kBackward), pb.flops_of(ProfilePhase::kBackward));
  // The recompute is every block's forward again, once per micro-batch: on
  // the blocks, and on the root whose backward ran it (not in its backward).
  int64_t blocks_fwd = 0, blocks_recompute = 0;
  for (Module* block : ckpt->model().checkpointable_layers()) {
    const ModuleProfile p = b.of(*block);
    blocks_fwd += p.flops_of(ProfilePhase::kForward);
    blocks_recompute += p.flops_of(ProfilePhase::kRecompute);
    EXPECT_EQ(p.calls_of(ProfilePhase::kRecompute), kAccum) << block->name();
    EXPECT_GT(p.seconds_of(ProfilePhase::kRecompute), 0.0) << block->name();
  }
  EXPECT_GT(blocks_fwd, 0);
  EXPECT_EQ(blocks_recompute, blocks_fwd);
  EXPECT_EQ(pb.flops_of(ProfilePhase::kRecompute), blocks_fwd);
  EXPECT_EQ(pb.calls_of(ProfilePhase::kRecompute), 0);
  // The losses are those of the run without a profiler (it only observes).
  auto again = Engine::create(std::make_unique<Gpt>(tiny_gpt()), engine_config(true), backend).value();
  run_step(*again, 3);
  EXPECT_EQ(again->master_values(*again->model().parameters()[0]),
            ckpt->master_values(*ckpt->model().parameters()[0]));
}

// The report names the model's family and sums a Llama's blocks under their
// own names (layers.*), never calling it a GPT or its blocks h.*; a GPT-2's
// summary still says GPT-2 and h.*.
TEST(FlopsProfilerTest, NamesTheFamilyAndItsBlocks) {
  CpuBackend backend;
  GptConfig llama = tiny_gpt();
  llama.arch = ModelArch::kLlama;
  llama.n_kv_head = 1;
  llama.d_ff = 64;
  for (const GptConfig& g : {llama, tiny_gpt()}) {
    auto engine = Engine::create(std::make_unique<Gpt>(g), engine_config(false), backend).value();
    ModuleProfiler profiler(backend);
    engine->set_module_profiler(&profiler);
    run_step(*engine, 1);
    engine->set_module_profiler(nullptr);
    FlopsProfileStep step;
    step.backend = "cpu";
    const std::string report = flops_profile_report(engine->model(), profiler, step, {});
    if (g.rope()) {
      EXPECT_NE(report.find("Llama n_layer=2 n_head=2 n_kv_head=1 d_model=32 d_ff=64\n"), std::string::npos) << report;
      EXPECT_NE(report.find("repeated layers summed: layers.* is every layers.N"), std::string::npos) << report;
      EXPECT_NE(report.find("layers.*: "), std::string::npos) << report;
      EXPECT_NE(report.find(" layers.1.mlp.down_proj "), std::string::npos) << report;
      EXPECT_EQ(report.find("GPT"), std::string::npos) << report;
      EXPECT_EQ(report.find("h.*"), std::string::npos) << report;
      EXPECT_EQ(report.find(" h.0"), std::string::npos) << report;
    } else {
      EXPECT_NE(report.find("GPT-2 n_layer=2 n_head=2 d_model=32\n"), std::string::npos) << report;
      EXPECT_NE(report.find("repeated layers summed: h.* is every h.N"), std::string::npos) << report;
      EXPECT_EQ(report.find("layers.*"), std::string::npos) << report;
    }
  }
}

TEST(FlopsProfilerTest, ModulePatternSumsRepeatedLayers) {
  EXPECT_EQ(module_pattern("h.10.attn.c_attn"), "h.*.attn.c_attn");
  EXPECT_EQ(module_pattern("layers.3.mlp.down_proj"), "layers.*.mlp.down_proj");
  EXPECT_EQ(module_pattern("lm_head"), "lm_head");
  EXPECT_EQ(module_pattern("h2.0"), "h2.*");
}

// ---- zero-train

const char* kRun = R"({
  "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 256, "seq_len": 16},
  "data": {"format": "text", "path": "/usr/share/common-licenses"},
  "run": {"steps": 3},
  "train_batch_size": 8,
  "gradient_accumulation_steps": 2,
  "steps_per_print": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}
})";

testing::CommandResult zero_train(const std::string& overlay, int ranks = 1) {
  const std::string config = testing::write_test_file("profiler_run.json", kRun);
  const std::string over = testing::write_test_file("profiler_overlay.json", overlay);
  const std::string launcher = ranks == 1 ? "" : std::string(ZE_MPIEXEC) +
                                                     " --allow-run-as-root --oversubscribe -np " +
                                                     std::to_string(ranks) + " ";
  return testing::run_command("timeout 300 " + launcher + ZE_TRAIN_BIN + " --config " + config + " --config " + over);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(FlopsProfilerCliTest, PrintsTheProfileOfProfileStepOnce) {
  const testing::CommandResult r = zero_train(R"({"flops_profiler": {"enabled": true, "profile_step": 1,
      "module_depth": -1, "top_modules": 1, "detailed": true, "output_file": null}})");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "Profile summary at step 1 "), 1u) << r.output;
  EXPECT_NE(r.output.find("fwd FLOPs per rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(2.00 x fwd)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("h.1.mlp.c_fc"), std::string::npos) << r.output;
  // global_steps 1 is the second step: its profile comes after step 1's
  // progress line and before step 2's (printed after the step, like it).
  const size_t profile = r.output.find("Profile summary"), step1 = r.output.find("step 1/3"),
               step2 = r.output.find("step 2/3");
  ASSERT_NE(step1, std::string::npos) << r.output;
  ASSERT_NE(step2, std::string::npos) << r.output;
  EXPECT_LT(step1, profile) << r.output;
  EXPECT_LT(profile, step2) << r.output;
}

TEST(FlopsProfilerCliTest, WritesOutputFilePerPipelineStage) {
  const std::string file = testing::test_path("flops_profile.txt");
  std::filesystem::remove(file);
  std::filesystem::remove(file + ".stage1");
  const testing::CommandResult r = zero_train(
      R"({"pipeline": {"stages": 2}, "flops_profiler": {"enabled": true, "profile_step": 0, "detailed": false,
          "output_file": ")" + file + R"("}})",
      2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("Profile summary"), std::string::npos) << r.output;
  for (const std::string& path : {file, file + ".stage1"}) {
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path << "\n" << r.output;
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("Profile summary at step 0 "), std::string::npos) << text.str();
    EXPECT_NE(text.str().find(path == file ? "0 of 2" : "1 of 2"), std::string::npos) << text.str();
  }
}

TEST(FlopsProfilerCliTest, SaysWhenProfileStepIsNeverReachedAndRefusesBadKeys) {
  testing::CommandResult r = zero_train(R"({"flops_profiler": {"enabled": true, "profile_step": 7}})");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("flops_profiler.profile_step 7 is outside this run's steps"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Profile summary"), std::string::npos) << r.output;

  r = zero_train(R"({"flops_profiler": {"enabled": true, "module_dept": 2}})");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("flops_profiler.module_dept"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("module_depth"), std::string::npos) << r.output;

  r = zero_train(R"({"flops_profiler": {"enabled": true, "output_file": "/nonexistent/dir/p.txt"}})");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("flops_profiler.output_file"), std::string::npos) << r.output;
}

// MFU's denominator without --peak-tflops off the CPU: the backend's rate on
// the model's largest GEMM, its dimensions capped, its buffers freed; on the
// CPU zero-train takes the ISA x clock peak, says so and puts MFU on the
// progress line.
TEST(GemmRateTest, MeasuresTheCappedShapeAndFreesItsBuffers) {
  CpuBackend backend;
  const int64_t before = MemoryTracker::global().snapshot().by_category[static_cast<int>(Tier::kHost)]
                             [static_cast<int>(MemCategory::kWorkspace)].current;
  const GemmRate r = measure_gemm_rate(backend, DType::kF32, 10000, 64, 256);
  EXPECT_EQ(r.m, 4096);
  EXPECT_EQ(r.k, 64);
  EXPECT_EQ(r.n, 256);
  EXPECT_GE(r.reps, 2);
  EXPECT_GT(r.tflops, 0.0);
  EXPECT_NE(r.describe().find("(4096 x 64 x 256 fp32)"), std::string::npos) << r.describe();
  // Its A, B and C (5.3 MB here) are gone; the GEMM's own scratch stays cached.
  EXPECT_LT(MemoryTracker::global().snapshot().by_category[static_cast<int>(Tier::kHost)]
                    [static_cast<int>(MemCategory::kWorkspace)].current -
                before,
            64 << 10);
}

TEST(GemmRateTest, ZeroTrainGivesMfuAgainstTheCpusPeak) {
  const testing::CommandResult r = zero_train("{}");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" TFLOP/s per rank, the fp32 FMA peak of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("TFLOP/s MFU "), std::string::npos) << r.output;
}

TEST(CommsLoggerCliTest, PrintsRankZerosSummaryAndVerboseOps) {
  const testing::CommandResult r = zero_train(
      R"({"zero_optimization": {"stage": 2}, "comms_logger": {"enabled": true, "verbose": true, "prof_all": true,
          "debug": false}})",
      2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t summary = r.output.find("comms_logger: rank 0's collectives over the run");
  ASSERT_NE(summary, std::string::npos) << r.output;
  const std::string table = r.output.substr(summary);
  for (const char* op : {"reduce_scatter ", "all_gather ", "all_reduce_scalars "}) {
    EXPECT_NE(table.find(op), std::string::npos) << op << "\n" << table;
  }
  EXPECT_EQ(table.find("\nall_reduce "), std::string::npos) << table;  // stage 2 reduce-scatters
  // verbose: one line per op, rank 0's only, before the summary.
  EXPECT_GT(count(r.output.substr(0, summary), "comm op: reduce_scatter"), 0u) << r.output;
}

TEST(CommsLoggerCliTest, RecordsOnlyProfOpsAndRefusesUnknownNames) {
  testing::CommandResult r = zero_train(
      R"({"zero_optimization": {"stage": 2}, "comms_logger": {"enabled": true, "prof_all": false,
          "prof_ops": ["all_gather_into_tensor"]}})",
      2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t summary = r.output.find("comms_logger:");
  ASSERT_NE(summary, std::string::npos) << r.output;
  const std::string table = r.output.substr(summary);
  EXPECT_NE(table.find("all_gather "), std::string::npos) << table;
  EXPECT_EQ(table.find("reduce_scatter "), std::string::npos) << table;
  EXPECT_EQ(table.find("all_reduce_scalars "), std::string::npos) << table;

  r = zero_train(R"({"comms_logger": {"enabled": true, "prof_all": false, "prof_ops": ["alltoall"]}})");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("comms_logger.prof_ops: \"alltoall\" is not one of"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zero
