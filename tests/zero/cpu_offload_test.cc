// ZeRO-Offload (offload_optimizer.device "cpu", and at stage 3 offload_param
// "cpu") on the path a GPU rank takes, run here on the CPU backend through
// EngineConfig::force_offload_path: the optimizer state on a host backend of
// its own, the step on it (zero/host_step.h), gradients copied out of the
// compute backend's buffers and the new weights back in, through two staging
// sets in chunks, overlapped on two copy streams. The same code runs on a GPU
// (tests/cuda/gpt_training_test.cc checks it there against the CPU).
//
// What a user would notice, on every rank count this binary runs with:
//  * at stages 1-3, in fp32 and bf16, with sub-groups (and so chunks) much
//    smaller than a partition, losses, fp32 master weights and the model's
//    parameters are bitwise those of the same run without offload (the same
//    Adam kernel on the same values, chunk by chunk);
//  * the host backend holds exactly the optimizer state (master, exp_avg,
//    exp_avg_sq: 12 bytes per element of the partition), the compute backend
//    none of it, and the staging is 2 chunks of gradients + weights;
//  * with offload_param "cpu" the shard is written by the step and copied up
//    by each gather (prefetches included), still bitwise;
//  * the step streams correctly when the store's sub-groups are larger than
//    the chunk and not a multiple of it;
//  * checkpoints move between offloaded and resident runs;
//  * what the path does not run is refused with the key's name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "runtime/backend/cpu_backend.h"
#include "runtime/base/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/engine/engine.h"
#include "runtime/graph/gpt.h"
#include "tests/zero/mpi_test_main.h"
#include "tests/zero/offload_test_util.h"
#include "zero/host_step.h"
#include "zero/stage3_model_state.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using namespace offload_test;  // kModel, Rows, train_steps, masters, ...

struct RunSetup {
  int stage = 1;
  DType dtype = DType::kF32;
  bool offload = false;         // offload_optimizer "cpu", forced onto the device path
  bool offload_params = false;  // offload_param "cpu" too (stage 3)
  std::string name() const {
    return cat("stage ", stage, " ", dtype_name(dtype), offload ? " offloaded" : " resident",
               offload_params ? " + parameters" : "");
  }
};

EngineConfig config(const RunSetup& s) {
  EngineConfig ec;
  ec.micro_batch_size = kMicroBatch;
  ec.pre_divide = world().world_size();
  ec.param_dtype = s.dtype;
  ec.check_grad_overflow = false;
  ec.zero.stage = s.stage;
  ec.zero.sub_group_size = kSubGroup;
  ec.zero.param_persistence_threshold = 0;
  ec.optimizer = {.type = "AdamW", .lr = 1e-2f, .weight_decay = 0.01f};
  ec.force_offload_path = true;  // without an offload key it changes nothing
  if (s.offload) ec.zero.offload_optimizer.device = OffloadDevice::kCpu;
  if (s.offload_params) {
    ec.zero.offload_param.device = OffloadDevice::kCpu;
    ec.zero.prefetch_bucket_size = 2000;  // prefetch a few modules ahead
    ec.zero.max_reuse_distance = 0;       // and gather every parameter again in backward
  }
  return ec;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> master, params;
  int64_t held = 0;                  // elements of this rank's partition
  int64_t host_optimizer_bytes = 0;  // all of this rank's host optimizer state (both backends)
  int64_t compute_optimizer_bytes = 0, host_backend_optimizer_bytes = -1;
  int64_t staging_bytes = 0;         // the compute backend's comm buffers at rest: the staging
  int64_t chunk = 0, host_copies = 0, prefetches = 0;
  bool host_path = false;
};

Trained train(const RunSetup& s) {
  const int64_t optim0 = tracked(Tier::kHost, MemCategory::kOptimizerState);
  CpuBackend backend;  // the "device"
  auto engine = initialize(std::make_unique<Gpt>(kModel), config(s), backend, &world());
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  Trained out;
  train_steps(**engine, 0, kSteps, out.losses);
  out.master = masters(**engine);
  out.params = parameters(**engine);
  const ModelState& state = (*engine)->state();
  out.held = (*engine)->state().state_store().numel();
  out.host_optimizer_bytes = tracked(Tier::kHost, MemCategory::kOptimizerState) - optim0;
  out.compute_optimizer_bytes = backend.memory().at(Tier::kHost, MemCategory::kOptimizerState).current;
  if (state.host_backend() != nullptr) {
    out.host_backend_optimizer_bytes =
        state.host_backend()->memory().at(Tier::kHost, MemCategory::kOptimizerState).current;
  }
  out.staging_bytes = backend.memory().at(Tier::kHost, MemCategory::kCommBuffers).current;
  out.host_path = state.host_step() != nullptr;
  if (out.host_path) out.chunk = state.host_step()->chunk_elems();
  if (s.stage == 3) {
    const ParamCoordinator& c = dynamic_cast<const Stage3ModelState&>(state).coordinator();
    out.host_copies = c.host_copies();
    out.prefetches = c.prefetches();
  }
  return out;
}

TEST(CpuOffloadTest, TrainsBitwiseLikeResidentStateAtEveryStage) {
  for (int stage : {1, 2, 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const RunSetup resident{stage, dtype, false};
      const Trained ref = train(resident);
      const RunSetup offloaded{stage, dtype, true};
      const Trained got = train(offloaded);
      const std::string name = offloaded.name();
      EXPECT_FALSE(ref.host_path) << resident.name();
      ASSERT_TRUE(got.host_path) << name;
      EXPECT_EQ(got.losses, ref.losses) << name;
      EXPECT_EQ(got.master, ref.master) << name;
      EXPECT_EQ(got.params, ref.params) << name;
      EXPECT_LT(ref.losses.back(), ref.losses.front()) << resident.name() << " learns";
      // Master + exp_avg + exp_avg_sq of this rank's partition, all on the
      // host backend; none on the compute backend.
      EXPECT_EQ(got.held, ref.held) << name;
      EXPECT_EQ(got.host_backend_optimizer_bytes, 12 * got.held) << name;
      EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
      EXPECT_EQ(ref.compute_optimizer_bytes, 12 * ref.held) << resident.name();
      EXPECT_EQ(got.host_optimizer_bytes, ref.host_optimizer_bytes) << name;
      // Two staging sets of one chunk (a sub-group here) of gradients and weights.
      const int64_t chunk = std::min(kSubGroup, got.held);
      EXPECT_EQ(got.chunk, chunk) << name;
      EXPECT_EQ(got.staging_bytes, 2 * chunk * 2 * static_cast<int64_t>(dtype_size(dtype))) << name;
      EXPECT_EQ(ref.staging_bytes, 0) << resident.name();
    }
  }
}

TEST(CpuOffloadTest, ParametersInHostMemoryTrainBitwiseLikeResidentParameters) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const RunSetup resident{3, dtype, false};
    const Trained ref = train(resident);
    const RunSetup offloaded{3, dtype, true, true};
    const Trained got = train(offloaded);
    const std::string name = offloaded.name();
    ASSERT_TRUE(got.host_path) << name;
    EXPECT_EQ(got.losses, ref.losses) << name;
    EXPECT_EQ(got.master, ref.master) << name;
    EXPECT_EQ(got.params, ref.params) << name;
    // The step writes the shard in place: only gradients are staged.
    const int64_t chunk = std::min(kSubGroup, got.held);
    EXPECT_EQ(got.staging_bytes, 2 * chunk * static_cast<int64_t>(dtype_size(dtype))) << name;
    EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
    // Every gather copied its chunk up from the host shard, prefetches too.
    EXPECT_GT(got.host_copies, 0) << name;
    EXPECT_GT(got.prefetches, 0) << name;
    EXPECT_EQ(ref.host_copies, 0) << resident.name();
  }
}

// The host step on its own, against the optimizer run over the same arrays
// in one piece: sub-groups of 1000 elements streamed in chunks of 300 (so
// ranges cross chunk boundaries), then cast back.
TEST(CpuOffloadTest, StreamsSubGroupsLargerThanTheChunkBitwise) {
  constexpr int64_t n = 2500, chunk = 300;
  CpuBackend device, host, reference;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> master0(n), grad(n);
  for (float& v : master0) v = normal(rng);
  for (float& v : grad) v = normal(rng);

  const OptimizerConfig oc{.type = "AdamW", .lr = 1e-2f, .weight_decay = 0.01f};
  auto opt = make_optimizer(oc, host).value();
  auto store = make_resident_state_store(host, n, opt->state_names(), /*sub_group_size=*/1000).value();
  ASSERT_TRUE(store->write(0, 0, master0).ok());
  auto step = HostStep::create(device, host, n, chunk, DType::kF32, DType::kBF16, false).value();
  EXPECT_EQ(step->staging_bytes(), 2 * chunk * (4 + 2));

  auto ref_opt = make_optimizer(oc, reference).value();
  Tensor ref_master = reference.empty({n}, DType::kF32, MemCategory::kOptimizerState);
  Tensor ref_m = reference.zeros({n}, DType::kF32, MemCategory::kOptimizerState);
  Tensor ref_v = reference.zeros({n}, DType::kF32, MemCategory::kOptimizerState);
  Tensor ref_param = reference.empty({n}, DType::kBF16, MemCategory::kParameters);
  std::copy(master0.begin(), master0.end(), ref_master.f32());

  Tensor grads = device.empty({n}, DType::kF32, MemCategory::kGradients);
  std::copy(grad.begin(), grad.end(), grads.f32());
  Tensor params = device.zeros({n}, DType::kBF16, MemCategory::kParameters);
  for (int64_t t = 1; t <= 3; ++t) {
    const Optimizer::StepArgs args{.step = t, .lr = 1e-2f, .grad_scale = 0.5f};
    ASSERT_TRUE(step->step(*store, *opt, grads, params, args).ok());
    ref_opt->step(ref_master, grads, {ref_m, ref_v}, ref_param, args);
    EXPECT_EQ(std::memcmp(params.data(), ref_param.data(), params.nbytes()), 0) << "step " << t;
    EXPECT_EQ(store->read(0, 0, n).value(), std::vector<float>(ref_master.f32(), ref_master.f32() + n)) << t;
    EXPECT_EQ(store->read(2, 0, n).value(), std::vector<float>(ref_v.f32(), ref_v.f32() + n)) << t;
  }
  device.ops().fill(params, 0.0f);
  ASSERT_TRUE(step->cast_master_into(*store, params).ok());
  EXPECT_EQ(std::memcmp(params.data(), ref_param.data(), params.nbytes()), 0) << "cast";
}

TEST(CpuOffloadTest, CheckpointsMoveBetweenOffloadedAndResidentRuns) {
  const std::string ckpt = (fs::current_path() / cat("cpu_offload_test.ckpt.np", world().world_size())).string();
  if (world().rank() == 0) fs::remove_all(ckpt);
  EXPECT_TRUE(world().barrier().ok());
  CpuBackend backend;
  // Resident run: 3 steps, save, 2 more steps.
  std::vector<double> ref_losses;
  std::vector<std::vector<float>> ref_master, ref_params;
  {
    auto e = initialize(std::make_unique<Gpt>(kModel), config({2, DType::kBF16, false}), backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    train_steps(**e, 0, 3, ref_losses);
    EXPECT_TRUE(save_checkpoint(**e, {ckpt, "mid", 0}).ok());
    train_steps(**e, 3, 5, ref_losses);
    ref_master = masters(**e);
    ref_params = parameters(**e);
  }
  // An offloaded run resumes it (the master goes into host memory, the cast
  // weights up through the staging) and finishes bitwise the same way.
  std::vector<double> losses(ref_losses.begin(), ref_losses.begin() + 3);
  {
    auto e = initialize(std::make_unique<Gpt>(kModel), config({2, DType::kBF16, true}), backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    absl::Status loaded = load_checkpoint(**e, ckpt, "mid");
    EXPECT_TRUE(loaded.ok()) << loaded;
    train_steps(**e, 3, 5, losses);
    EXPECT_EQ(losses, ref_losses);
    EXPECT_EQ(masters(**e), ref_master);
    EXPECT_EQ(parameters(**e), ref_params);
    EXPECT_TRUE(save_checkpoint(**e, {ckpt, "end", 0}).ok());
  }
  // Its checkpoint loads into an offloaded stage-3 run with parameters in
  // host memory, and into a resident one, exactly.
  for (const RunSetup& s : {RunSetup{3, DType::kBF16, true, true}, RunSetup{3, DType::kBF16, false}}) {
    auto e = initialize(std::make_unique<Gpt>(kModel), config(s), backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_TRUE(load_checkpoint(**e, ckpt, "end").ok()) << s.name();
    EXPECT_EQ(masters(**e), ref_master) << s.name();
    EXPECT_EQ(parameters(**e), ref_params) << s.name();
  }
}

TEST(CpuOffloadTest, WithoutTheForcedPathCpuOffloadMovesNothingOnTheCpuBackend) {
  EngineConfig ec = config({2, DType::kF32, true, false});
  ec.force_offload_path = false;
  CpuBackend backend;
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->state().host_step(), nullptr);
  EXPECT_EQ((*e)->state().host_backend(), nullptr);
  EXPECT_EQ(backend.memory().at(Tier::kHost, MemCategory::kOptimizerState).current,
            12 * (*e)->state().state_store().numel());
}

TEST(CpuOffloadTest, RefusesWhatTheHostPathDoesNotRun) {
  CpuBackend backend;
  EngineConfig stage0 = config({0, DType::kF32, true});
  auto e = initialize(std::make_unique<Gpt>(kModel), stage0, backend, &world());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("offload_optimizer.device \"cpu\" needs ZeRO stage 1, 2 or 3"),
            std::string::npos)
      << e.status();
  EngineConfig params_only = config({3, DType::kF32, false, true});
  e = initialize(std::make_unique<Gpt>(kModel), params_only, backend, &world());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("offload_param.device \"cpu\" needs offload_optimizer.device \"cpu\""),
            std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace zero
