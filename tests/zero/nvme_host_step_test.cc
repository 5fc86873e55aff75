// ZeRO-Infinity's optimizer part for GPU ranks (offload_optimizer.device
// "nvme" on a device backend): the host step of ZeRO-Offload
// (zero/host_step.h) run over the NVMe store built on the host backend, so
// the swap records stream (read i+1 / update i / write i-1) while gradients
// stream down and weights up. Run here on the CPU backend through
// EngineConfig::force_offload_path, the same code a GPU rank runs
// (tests/cuda/gpt_training_test.cc checks it there against the CPU).
//
// What a user would notice, on every rank count this binary runs with:
//  * at stages 1-3, in fp32 and bf16, with sub-groups much smaller than a
//    partition, losses, fp32 master weights and the model's parameters are
//    bitwise those of the same run with resident state;
//  * no optimizer state in memory on either backend: the swap file's bytes on
//    the NVMe tier are the layout's, its buffers are the host backend's swap
//    buffers, and the compute backend holds only the staging;
//  * at stage 3 with offload_param "nvme" the shard rides in the records, each
//    gather's chunk lands in host staging and goes up, still bitwise;
//  * the host step copes with the NVMe store's ranges (pieces smaller than a
//    sub-group, sub-groups crossing chunks);
//  * checkpoints move between these runs and resident ones;
//  * offload_param "nvme" without offload_optimizer "nvme" is refused by key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "offload/nvme_state_store.h"
#include "runtime/backend/cpu_backend.h"
#include "runtime/base/strings.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/engine/engine.h"
#include "runtime/graph/gpt.h"
#include "tests/zero/mpi_test_main.h"
#include "tests/zero/offload_test_util.h"
#include "zero/host_step.h"
#include "zero/stage3_model_state.h"
#include "zero/swap_layout.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using namespace offload_test;  // kModel, Rows, train_steps, masters, ...

constexpr int64_t kBuffers = 3;

struct RunSetup {
  int stage = 1;
  DType dtype = DType::kF32;
  bool nvme = false;         // offload_optimizer "nvme", forced onto the device path
  bool nvme_params = false;  // offload_param "nvme" too (stage 3)
  std::string name() const {
    return cat("stage ", stage, " ", dtype_name(dtype), nvme ? " nvme (device path)" : " resident",
               nvme_params ? " + parameters" : "");
  }
};

EngineConfig config(const RunSetup& s, const std::string& swap_dir) {
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
  if (s.nvme) {
    ec.zero.offload_optimizer.device = OffloadDevice::kNvme;
    ec.zero.offload_optimizer.nvme_path = swap_dir;
    ec.zero.offload_optimizer.buffer_count = kBuffers;
  }
  if (s.nvme_params) {
    ec.zero.offload_param.device = OffloadDevice::kNvme;
    ec.zero.offload_param.nvme_path = swap_dir;
    ec.zero.offload_param.buffer_count = 2;
    ec.zero.prefetch_bucket_size = 2000;  // prefetch a few modules ahead
    ec.zero.max_reuse_distance = 0;       // and gather every parameter again in backward
  }
  return ec;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> master, params;
  int64_t held = 0, max_chunk = 0;
  int64_t host_optimizer_bytes = 0;  // host-tier optimizer state, both backends
  int64_t compute_optimizer_bytes = 0, host_backend_optimizer_bytes = -1, host_backend_swap_bytes = -1;
  int64_t nvme_bytes = 0;
  int64_t staging_bytes = 0;  // the compute backend's comm buffers at rest
  int64_t chunk = 0, host_copies = 0;
  bool host_path = false;
};

Trained train(const RunSetup& s, const std::string& swap_dir) {
  const int64_t optim0 = tracked(Tier::kHost, MemCategory::kOptimizerState);
  const int64_t nvme0 = tracked(Tier::kNvme, MemCategory::kOptimizerState);
  CpuBackend backend;  // the "device"
  auto engine = initialize(std::make_unique<Gpt>(kModel), config(s, swap_dir), backend, &world());
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  Trained out;
  train_steps(**engine, 0, kSteps, out.losses);
  out.master = masters(**engine);
  out.params = parameters(**engine);
  const ModelState& state = (*engine)->state();
  out.held = (*engine)->state().state_store().numel();
  for (Parameter* p : (*engine)->model().parameters()) {
    out.max_chunk = std::max(out.max_chunk, (p->numel() + world().world_size() - 1) / world().world_size());
  }
  out.host_optimizer_bytes = tracked(Tier::kHost, MemCategory::kOptimizerState) - optim0;
  out.nvme_bytes = tracked(Tier::kNvme, MemCategory::kOptimizerState) - nvme0;
  out.compute_optimizer_bytes = backend.memory().at(Tier::kHost, MemCategory::kOptimizerState).current;
  if (state.host_backend() != nullptr) {
    out.host_backend_optimizer_bytes =
        state.host_backend()->memory().at(Tier::kHost, MemCategory::kOptimizerState).current;
    out.host_backend_swap_bytes = state.host_backend()->memory().at(Tier::kHost, MemCategory::kSwapBuffers).current;
  }
  out.staging_bytes = backend.memory().at(Tier::kHost, MemCategory::kCommBuffers).current;
  out.host_path = state.host_step() != nullptr;
  if (out.host_path) out.chunk = state.host_step()->chunk_elems();
  if (s.stage == 3) out.host_copies = dynamic_cast<const Stage3ModelState&>(state).coordinator().host_copies();
  return out;
}

TEST(NvmeHostStepTest, TrainsBitwiseLikeResidentStateAtEveryStage) {
  const std::string dir = shared_dir("nvme_host_step_test.swap");
  for (int stage : {1, 2, 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const RunSetup resident{stage, dtype, false};
      const Trained ref = train(resident, dir);
      const RunSetup offloaded{stage, dtype, true};
      const Trained got = train(offloaded, dir);
      const std::string name = offloaded.name();
      EXPECT_FALSE(ref.host_path) << resident.name();
      ASSERT_TRUE(got.host_path) << name;
      EXPECT_EQ(got.losses, ref.losses) << name;
      EXPECT_EQ(got.master, ref.master) << name;
      EXPECT_EQ(got.params, ref.params) << name;
      EXPECT_LT(ref.losses.back(), ref.losses.front()) << resident.name() << " learns";
      // No optimizer state in memory anywhere: master + exp_avg + exp_avg_sq
      // are in the swap file, its buffers on the host backend.
      EXPECT_EQ(got.held, ref.held) << name;
      EXPECT_EQ(ref.host_optimizer_bytes, 12 * ref.held) << resident.name();
      EXPECT_EQ(got.host_optimizer_bytes, 0) << name;
      EXPECT_EQ(got.host_backend_optimizer_bytes, 0) << name;
      EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
      const SwapLayout layout = SwapLayout::make(got.held, kSubGroup, 3);
      EXPECT_EQ(got.nvme_bytes, layout.file_bytes()) << name;
      EXPECT_EQ(got.host_backend_swap_bytes, layout.buffer_bytes(kBuffers)) << name;
      // Two staging sets of one chunk (a sub-group here) of gradients and weights.
      const int64_t chunk = std::min(kSubGroup, got.held);
      EXPECT_EQ(got.chunk, chunk) << name;
      EXPECT_EQ(got.staging_bytes, 2 * chunk * 2 * static_cast<int64_t>(dtype_size(dtype))) << name;
      EXPECT_EQ(ref.staging_bytes, 0) << resident.name();
    }
  }
  // Every engine is gone: so is every swap file.
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

TEST(NvmeHostStepTest, ParametersOnNvmeTrainBitwiseLikeResidentParameters) {
  const std::string dir = shared_dir("nvme_host_step_test.swap3");
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const RunSetup resident{3, dtype, false};
    const Trained ref = train(resident, dir);
    const RunSetup offloaded{3, dtype, true, true};
    const Trained got = train(offloaded, dir);
    const std::string name = offloaded.name();
    ASSERT_TRUE(got.host_path) << name;
    EXPECT_EQ(got.losses, ref.losses) << name;
    EXPECT_EQ(got.master, ref.master) << name;
    EXPECT_EQ(got.params, ref.params) << name;
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    const SwapLayout layout = SwapLayout::make(got.held, kSubGroup, 3, elem);
    EXPECT_EQ(got.nvme_bytes, layout.file_bytes()) << name;
    EXPECT_EQ(got.host_backend_swap_bytes,
              layout.buffer_bytes(kBuffers) + 2 * layout.param_read_buffer_bytes(got.max_chunk))
        << name;
    EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
    // The step writes the weights into the records: only gradients are
    // staged, beside one chunk of read staging for the gathers.
    const int64_t chunk = std::min(kSubGroup, got.held);
    EXPECT_EQ(got.staging_bytes, 2 * chunk * elem + got.max_chunk * elem) << name;
    // Every gather's chunk went up from the read staging.
    EXPECT_GT(got.host_copies, 0) << name;
    EXPECT_EQ(ref.host_copies, 0) << resident.name();
  }
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

// The host step on its own over an NVMe store that hands out pieces of 128
// elements (poll_every) of sub-groups of 1000, streamed in chunks of 300, so
// pieces cross neither but sub-groups cross chunks; against the optimizer
// run over the same arrays in one piece, then cast back.
TEST(NvmeHostStepTest, StreamsNvmePiecesThroughChunksBitwise) {
  if (world().rank() != 0) GTEST_SKIP() << "one rank is enough";
  constexpr int64_t n = 2500, chunk = 300;
  const std::string dir = shared_dir("nvme_host_step_test.swap_unit");
  CpuBackend device, host, reference;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> master0(n), grad(n);
  for (float& v : master0) v = normal(rng);
  for (float& v : grad) v = normal(rng);

  const OptimizerConfig oc{.type = "AdamW", .lr = 1e-2f, .weight_decay = 0.01f};
  auto opt = make_optimizer(oc, host).value();
  NvmeStateStoreOptions so;
  so.nvme_path = dir;
  so.buffer_count = 3;
  so.sub_group_size = 1000;
  so.poll_every = 128;
  std::vector<std::string> names = {"master"};
  for (const std::string& s : opt->state_names()) names.push_back(s);
  auto created = NvmeStateStore::create(host, n, names, so);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<NvmeStateStore> store = *std::move(created);
  ASSERT_TRUE(store->write(0, 0, master0).ok());
  ASSERT_TRUE(store->flush().ok());
  auto step = HostStep::create(device, host, n, chunk, DType::kF32, DType::kBF16, false, true).value();
  EXPECT_NE(step->describe().find("NVMe"), std::string::npos) << step->describe();

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
  store.reset();
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

TEST(NvmeHostStepTest, CheckpointsMoveBetweenNvmeOffloadedAndResidentRuns) {
  const std::string swap = shared_dir("nvme_host_step_test.swap2");
  const std::string ckpt = (fs::current_path() / cat("nvme_host_step_test.ckpt.np", world().world_size())).string();
  if (world().rank() == 0) fs::remove_all(ckpt);
  EXPECT_TRUE(world().barrier().ok());
  CpuBackend backend;
  // Resident run: 3 steps, save, 2 more steps.
  std::vector<double> ref_losses;
  std::vector<std::vector<float>> ref_master, ref_params;
  {
    auto e = initialize(std::make_unique<Gpt>(kModel), config({2, DType::kBF16, false}, swap), backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    train_steps(**e, 0, 3, ref_losses);
    EXPECT_TRUE(save_checkpoint(**e, {ckpt, "mid", 0}).ok());
    train_steps(**e, 3, 5, ref_losses);
    ref_master = masters(**e);
    ref_params = parameters(**e);
  }
  // The NVMe-offloaded device path resumes it (the master into the swap
  // records, the cast weights up through the staging), finishes bitwise the
  // same way and saves.
  std::vector<double> losses(ref_losses.begin(), ref_losses.begin() + 3);
  {
    auto e = initialize(std::make_unique<Gpt>(kModel), config({2, DType::kBF16, true}, swap), backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    absl::Status loaded = load_checkpoint(**e, ckpt, "mid");
    EXPECT_TRUE(loaded.ok()) << loaded;
    train_steps(**e, 3, 5, losses);
    EXPECT_EQ(losses, ref_losses);
    EXPECT_EQ(masters(**e), ref_master);
    EXPECT_EQ(parameters(**e), ref_params);
    EXPECT_TRUE(save_checkpoint(**e, {ckpt, "end", 0}).ok());
  }
  // Its checkpoint loads exactly into a stage-3 run with parameters on NVMe
  // too (the cast weights into the records), and into a resident one.
  for (const RunSetup& s : {RunSetup{3, DType::kBF16, true, true}, RunSetup{3, DType::kBF16, false}}) {
    auto e = initialize(std::make_unique<Gpt>(kModel), config(s, swap), backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_TRUE(load_checkpoint(**e, ckpt, "end").ok()) << s.name();
    EXPECT_EQ(masters(**e), ref_master) << s.name();
    EXPECT_EQ(parameters(**e), ref_params) << s.name();
  }
  EXPECT_TRUE(fs::is_empty(swap)) << swap;
}

TEST(NvmeHostStepTest, RefusesParametersOnNvmeWithoutTheOptimizerThere) {
  const std::string swap = shared_dir("nvme_host_step_test.swap4");
  CpuBackend backend;
  EngineConfig ec = config({3, DType::kF32, false, true}, swap);
  ec.zero.offload_optimizer.device = OffloadDevice::kCpu;
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("offload_param.device \"nvme\" needs offload_optimizer.device \"nvme\""),
            std::string::npos)
      << e.status();
}

}  // namespace
}  // namespace zero
