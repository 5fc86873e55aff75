// The host step (zero/host_step.h): the path a GPU rank takes with
// offload_optimizer.device "cpu" (ZeRO-Offload) or "nvme" (ZeRO-Infinity's
// optimizer part), and at stage 3 offload_param on the same device. The
// optimizer state lives on a host backend of its own, in host memory or in the
// NVMe store built there (its swap records streaming read i+1 / update i /
// write i-1); the step runs on it, gradients copied out of the compute
// backend's buffers and the new weights back in, through two staging sets in
// chunks, overlapped on two copy streams. Run here on the CPU backend through
// EngineConfig::force_offload_path, the same code a GPU rank runs
// (tests/kernels/cuda/gpt_training_test.cc checks it there against the CPU). Every
// test but the last runs once per store: host memory ("cpu") and NVMe.
//
// What a user would notice, on every rank count this binary runs with:
//  * at stages 1-3, in fp32 and bf16, with sub-groups (and so chunks) much
//    smaller than a partition, losses, fp32 master weights and the model's
//    parameters are bitwise those of the same run without offload (the same
//    Adam kernel on the same values, chunk by chunk);
//  * the compute backend holds none of the optimizer state, only the staging
//    (2 chunks of gradients + weights); with "cpu" the host backend holds
//    exactly the state (master, exp_avg, exp_avg_sq: 12 bytes per element of
//    the partition), with "nvme" no state is in memory on either backend: the
//    swap file's bytes on the NVMe tier are the layout's, its buffers are the
//    host backend's swap buffers;
//  * at stage 3 with offload_param the shard is written by the step (in host
//    memory, or in the swap records) and each gather's chunk goes up from it
//    (prefetches included), still bitwise;
//  * the step streams correctly when the store's sub-groups are larger than
//    the chunk and not a multiple of it, and over the NVMe store's pieces
//    smaller than a sub-group;
//  * checkpoints move between offloaded and resident runs;
//  * offload_param "nvme" beside offload_optimizer "cpu" (the shard in a
//    swap file of its own) is bitwise too;
//  * what the path does not run is refused with the key's name;
//  * without the forced path, "cpu" on the CPU backend moves nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <random>

#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/swap_layout.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/zero/offload_test_util.h"
#include "zero/host_step.h"
#include "zero/stage3_model_state.h"
#ifdef ZE_HAVE_NVME_OFFLOAD
#include "offload/nvme_state_store.h"
#endif

namespace zero {
namespace {

namespace fs = std::filesystem;
using namespace offload_test;  // kModel, Rows, base_config, train_steps, masters, ...

// Where the host step's store lives: host memory ("cpu") or an NVMe swap file.
enum class Store { kHost, kNvme };

OffloadDevice device_of(Store s) { return s == Store::kNvme ? OffloadDevice::kNvme : OffloadDevice::kCpu; }
const char* key_of(Store s) { return s == Store::kNvme ? "nvme" : "cpu"; }
void PrintTo(Store s, std::ostream* os) { *os << key_of(s); }

constexpr int64_t kBuffers = 3;       // offload_optimizer.buffer_count with "nvme"
constexpr int64_t kParamBuffers = 2;  // offload_param.buffer_count with "nvme"

struct RunSetup {
  int stage = 1;
  DType dtype = DType::kF32;
  bool offload = false;         // offload_optimizer on the store, forced onto the device path
  bool offload_params = false;  // offload_param there too (stage 3)
  std::string name(Store store) const {
    return cat("stage ", stage, " ", dtype_name(dtype), offload ? cat(" ", key_of(store), " (device path)") : " resident",
               offload_params ? " + parameters" : "");
  }
};

EngineConfig config(const RunSetup& s, Store store, const std::string& swap_dir) {
  EngineConfig ec = base_config(s.stage, s.dtype);
  ec.force_offload_path = true;  // without an offload key it changes nothing
  if (s.offload) offload_to(ec.zero.offload_optimizer, device_of(store), swap_dir, kBuffers);
  if (s.offload_params) offload_params_to(ec, device_of(store), swap_dir, kParamBuffers);
  return ec;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> master, params;
  int64_t held = 0, max_chunk = 0;   // elements of this rank's partition; of its largest gather chunk
  int64_t host_optimizer_bytes = 0;  // all of this rank's host optimizer state (both backends)
  int64_t compute_optimizer_bytes = 0, host_backend_optimizer_bytes = -1, host_backend_swap_bytes = -1;
  int64_t nvme_bytes = 0, nvme_parameter_bytes = 0;
  int64_t staging_bytes = 0;  // the compute backend's comm buffers at rest: the staging
  int64_t chunk = 0, host_copies = 0, prefetches = 0;
  bool host_path = false;
};

Trained train(const EngineConfig& ec) {
  const int64_t optim0 = tracked(Tier::kHost, MemCategory::kOptimizerState);
  const int64_t nvme0 = tracked(Tier::kNvme, MemCategory::kOptimizerState);
  const int64_t nvme_param0 = tracked(Tier::kNvme, MemCategory::kParameters);
  CpuBackend backend;  // the "device"
  auto engine = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
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
  out.nvme_parameter_bytes = tracked(Tier::kNvme, MemCategory::kParameters) - nvme_param0;
  out.compute_optimizer_bytes = backend.memory().at(Tier::kHost, MemCategory::kOptimizerState).current;
  if (state.host_backend() != nullptr) {
    const auto& host = state.host_backend()->memory();
    out.host_backend_optimizer_bytes = host.at(Tier::kHost, MemCategory::kOptimizerState).current;
    out.host_backend_swap_bytes = host.at(Tier::kHost, MemCategory::kSwapBuffers).current;
  }
  out.staging_bytes = backend.memory().at(Tier::kHost, MemCategory::kCommBuffers).current;
  out.host_path = state.host_step() != nullptr;
  if (out.host_path) out.chunk = state.host_step()->chunk_elems();
  if (ec.zero.stage == ZeroStage::k3) {
    const ParamCoordinator& c = dynamic_cast<const Stage3ModelState&>(state).coordinator();
    out.host_copies = c.host_copies();
    out.prefetches = c.prefetches();
  }
  return out;
}

Trained train(const RunSetup& s, Store store, const std::string& swap_dir) { return train(config(s, store, swap_dir)); }

class HostOffloadTest : public ::testing::TestWithParam<Store> {
 protected:
  Store store() const { return GetParam(); }
  // A directory for this test's swap files (the host store makes none).
  std::string swap_dir(const std::string& what) const {
    return shared_dir(cat("host_offload_test.", key_of(store()), ".", what));
  }
};

TEST_P(HostOffloadTest, TrainsBitwiseLikeResidentStateAtEveryStage) {
  const std::string dir = swap_dir("swap");
  for (int stage : {1, 2, 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const RunSetup resident{stage, dtype, false};
      const Trained ref = train(resident, store(), dir);
      const RunSetup offloaded{stage, dtype, true};
      const Trained got = train(offloaded, store(), dir);
      const std::string name = offloaded.name(store());
      EXPECT_FALSE(ref.host_path) << resident.name(store());
      ASSERT_TRUE(got.host_path) << name;
      EXPECT_EQ(got.losses, ref.losses) << name;
      EXPECT_EQ(got.master, ref.master) << name;
      EXPECT_EQ(got.params, ref.params) << name;
      EXPECT_LT(ref.losses.back(), ref.losses.front()) << resident.name(store()) << " learns";
      // Master + exp_avg + exp_avg_sq of this rank's partition: resident on
      // the compute backend; offloaded, none there.
      EXPECT_EQ(got.held, ref.held) << name;
      EXPECT_EQ(ref.compute_optimizer_bytes, 12 * ref.held) << resident.name(store());
      EXPECT_EQ(ref.host_optimizer_bytes, 12 * ref.held) << resident.name(store());
      EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
      if (store() == Store::kHost) {
        // All of it on the host backend.
        EXPECT_EQ(got.host_backend_optimizer_bytes, 12 * got.held) << name;
        EXPECT_EQ(got.host_optimizer_bytes, ref.host_optimizer_bytes) << name;
      } else {
        // None in memory anywhere: in the swap file, its buffers on the host backend.
        EXPECT_EQ(got.host_optimizer_bytes, 0) << name;
        EXPECT_EQ(got.host_backend_optimizer_bytes, 0) << name;
        const SwapLayout layout = SwapLayout::make(got.held, kSubGroup, 3);
        EXPECT_EQ(got.nvme_bytes, layout.file_bytes()) << name;
        EXPECT_EQ(got.host_backend_swap_bytes, layout.buffer_bytes(kBuffers)) << name;
      }
      // Two staging sets of one chunk (a sub-group here) of gradients and weights.
      const int64_t chunk = std::min(kSubGroup, got.held);
      EXPECT_EQ(got.chunk, chunk) << name;
      EXPECT_EQ(got.staging_bytes, 2 * chunk * 2 * static_cast<int64_t>(dtype_size(dtype))) << name;
      EXPECT_EQ(ref.staging_bytes, 0) << resident.name(store());
    }
  }
  // Every engine is gone: so is every swap file.
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

TEST_P(HostOffloadTest, OffloadedParametersTrainBitwiseLikeResidentParameters) {
  const std::string dir = swap_dir("swap3");
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const RunSetup resident{3, dtype, false};
    const Trained ref = train(resident, store(), dir);
    const RunSetup offloaded{3, dtype, true, true};
    const Trained got = train(offloaded, store(), dir);
    const std::string name = offloaded.name(store());
    ASSERT_TRUE(got.host_path) << name;
    EXPECT_EQ(got.losses, ref.losses) << name;
    EXPECT_EQ(got.master, ref.master) << name;
    EXPECT_EQ(got.params, ref.params) << name;
    EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
    // The step writes the shard in place (host memory, or the records): only
    // gradients are staged, and with NVMe one chunk of read staging for the gathers.
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    const int64_t chunk = std::min(kSubGroup, got.held);
    if (store() == Store::kHost) {
      EXPECT_EQ(got.staging_bytes, 2 * chunk * elem) << name;
    } else {
      EXPECT_EQ(got.staging_bytes, 2 * chunk * elem + got.max_chunk * elem) << name;
      const SwapLayout layout = SwapLayout::make(got.held, kSubGroup, 3, elem);
      // One file: its parameter arrays count as parameters, the rest as optimizer state.
      const int64_t shard_bytes = layout.groups() * layout.param_stride_bytes();
      EXPECT_EQ(got.nvme_bytes, layout.file_bytes() - shard_bytes) << name;
      EXPECT_EQ(got.nvme_parameter_bytes, shard_bytes) << name;
      EXPECT_EQ(got.host_backend_swap_bytes,
                layout.buffer_bytes(kBuffers) + kParamBuffers * layout.param_read_buffer_bytes(got.max_chunk))
          << name;
    }
    // Every gather copied its chunk up from the host shard (or the read staging).
    EXPECT_GT(got.host_copies, 0) << name;
    if (store() == Store::kHost) {
      EXPECT_GT(got.prefetches, 0) << name;  // prefetches too
    }
    EXPECT_EQ(ref.host_copies, 0) << resident.name(store());
  }
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

// The host step on its own, against the optimizer run over the same arrays
// in one piece: sub-groups of 1000 elements streamed in chunks of 300 (so
// ranges cross chunk boundaries), then cast back. The NVMe store hands them
// out in pieces of 128 elements (poll_every), which cross neither.
TEST_P(HostOffloadTest, StreamsSubGroupsLargerThanTheChunkBitwise) {
  const bool nvme = store() == Store::kNvme;
  if (nvme && world().rank() != 0) GTEST_SKIP() << "one rank is enough";
  constexpr int64_t n = 2500, chunk = 300;
  CpuBackend device, host, reference;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> master0(n), grad(n);
  for (float& v : master0) v = normal(rng);
  for (float& v : grad) v = normal(rng);

  const OptimizerConfig oc{.type = OptimizerType::kAdamW, .lr = 1e-2f, .weight_decay = 0.01f};
  auto opt = make_optimizer(oc, host).value();
  std::unique_ptr<OptimizerStateStore> states;
  std::string dir;
  if (!nvme) {
    states = make_resident_state_store(host, n, opt->state_names(), /*sub_group_size=*/1000).value();
  } else {
#ifdef ZE_HAVE_NVME_OFFLOAD
    dir = swap_dir("swap_unit");
    NvmeStateStoreOptions so;
    so.nvme_path = dir;
    so.buffer_count = 3;
    so.sub_group_size = 1000;
    so.poll_every = 128;
    std::vector<std::string> names = {"master"};
    for (const std::string& s : opt->state_names()) names.push_back(s);
    auto created = NvmeStateStore::create(host, n, names, so);
    ASSERT_TRUE(created.ok()) << created.status();
    states = *std::move(created);
#endif
  }
  ASSERT_NE(states, nullptr);
  ASSERT_TRUE(states->write(0, 0, master0).ok());
  ASSERT_TRUE(states->flush().ok());
  auto step = HostStep::create(device, host, n, chunk, DType::kF32, DType::kBF16, false, nvme).value();
  EXPECT_EQ(step->staging_bytes(), 2 * chunk * (4 + 2));
  if (nvme) {
    EXPECT_NE(step->describe().find("NVMe"), std::string::npos) << step->describe();
  }

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
    const Optimizer::StepArgs args{.step = t, .lr = 1e-2f, .grad_scale = 0.5f, .betas = std::nullopt};
    ASSERT_TRUE(step->step(*states, *opt, grads, params, args).ok());
    ref_opt->step(ref_master, grads, {ref_m, ref_v}, ref_param, args);
    EXPECT_EQ(std::memcmp(params.data(), ref_param.data(), params.nbytes()), 0) << "step " << t;
    EXPECT_EQ(states->read(0, 0, n).value(), std::vector<float>(ref_master.f32(), ref_master.f32() + n)) << t;
    EXPECT_EQ(states->read(2, 0, n).value(), std::vector<float>(ref_v.f32(), ref_v.f32() + n)) << t;
  }
  device.ops().fill(params, 0.0f);
  ASSERT_TRUE(step->cast_master_into(*states, params).ok());
  EXPECT_EQ(std::memcmp(params.data(), ref_param.data(), params.nbytes()), 0) << "cast";
  states.reset();
  if (nvme) {
    EXPECT_TRUE(fs::is_empty(dir)) << dir;
  }
}

TEST_P(HostOffloadTest, CheckpointsMoveBetweenOffloadedAndResidentRuns) {
  const std::string swap = swap_dir("swap2");
  const std::string ckpt = fresh_checkpoint_dir(cat("host_offload_test.", key_of(store())));
  CpuBackend backend;
  // Resident run: 3 steps, save, 2 more steps.
  const Finished ref = train_saving_mid(config({2, DType::kBF16, false}, store(), swap), backend, ckpt);
  // An offloaded run resumes it (the master into host memory or the swap
  // records, the cast weights up through the staging), finishes bitwise the
  // same way and saves.
  const Finished resumed = resume_mid_saving_end(config({2, DType::kBF16, true}, store(), swap), backend, ckpt, ref);
  EXPECT_EQ(resumed.losses, ref.losses);
  EXPECT_EQ(resumed.master, ref.master);
  EXPECT_EQ(resumed.params, ref.params);
  // Its checkpoint loads exactly into a stage-3 run with the parameters
  // offloaded too (the cast weights into the shard or the records), and into
  // a resident one.
  for (const RunSetup& s : {RunSetup{3, DType::kBF16, true, true}, RunSetup{3, DType::kBF16, false}}) {
    const Finished loaded = load_end(config(s, store(), swap), backend, ckpt);
    EXPECT_EQ(loaded.master, ref.master) << s.name(store());
    EXPECT_EQ(loaded.params, ref.params) << s.name(store());
  }
  EXPECT_TRUE(fs::is_empty(swap)) << swap;
}

TEST_P(HostOffloadTest, RefusesWhatTheHostPathDoesNotRun) {
  const std::string swap = swap_dir("swap4");
  const std::string key = key_of(store());
  CpuBackend backend;
  auto refusal = [&](const EngineConfig& ec) {
    auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
    EXPECT_FALSE(e.ok());
    return e.ok() ? std::string() : std::string(e.status().message());
  };
  const std::string stage0 = refusal(config({0, DType::kF32, true}, store(), swap));
  EXPECT_NE(stage0.find(cat("offload_optimizer.device \"", key, "\" needs ZeRO stage 1, 2 or 3")), std::string::npos)
      << stage0;
  // The parameters offloaded with the optimizer state left on the device:
  // nothing on the CPU would write the new weights into the host shard or
  // the parameter swap file.
  const std::string alone = refusal(config({3, DType::kF32, false, true}, store(), swap));
  const std::string needs = store() == Store::kHost ? "needs offload_optimizer.device \"cpu\" too"
                                                    : "needs offload_optimizer.device \"cpu\" or \"nvme\"";
  EXPECT_NE(alone.find(cat("offload_param.device \"", key, "\" ", needs)), std::string::npos) << alone;
}

#ifdef ZE_HAVE_NVME_OFFLOAD
// offload_param "nvme" beside offload_optimizer "cpu" (DeepSpeed allows it):
// the state in host memory, the step on the CPU writing the new weights into
// the parameter shard's own swap file, each gather reading its chunk from
// there and copying it up.
TEST(HostOffloadParamsTest, ParametersOnNvmeBesideCpuOptimizerTrainBitwise) {
  const std::string dir = shared_dir("host_offload_test.params_nvme");
  constexpr int64_t kRecord = 1100;  // elements: above the largest chunk, below the shard
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const Trained ref = train(config({3, dtype, false}, Store::kHost, dir));
    EngineConfig ec = config({3, dtype, true}, Store::kHost, dir);
    offload_params_to(ec, OffloadDevice::kNvme, dir, kParamBuffers);
    ec.zero.offload_param.buffer_size = kRecord;
    const Trained got = train(ec);
    const std::string name = cat(dtype_name(dtype), " cpu optimizer + nvme parameters");
    ASSERT_TRUE(got.host_path) << name;
    EXPECT_EQ(got.losses, ref.losses) << name;
    EXPECT_EQ(got.master, ref.master) << name;
    EXPECT_EQ(got.params, ref.params) << name;
    EXPECT_EQ(got.compute_optimizer_bytes, 0) << name;
    EXPECT_EQ(got.host_backend_optimizer_bytes, 12 * got.held) << name;
    const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
    const SwapLayout layout = param_swap_layout(got.held, kRecord, elem);
    EXPECT_EQ(got.nvme_bytes, 0) << name;
    EXPECT_EQ(got.nvme_parameter_bytes, layout.file_bytes()) << name;
    EXPECT_EQ(got.host_backend_swap_bytes, kParamWriteBuffers * layout.record_bytes() +
                                               kParamBuffers * layout.param_read_buffer_bytes(got.max_chunk))
        << name;
    // Only gradients are staged for the step, and one chunk for the gathers' reads.
    const int64_t chunk = std::min(kSubGroup, got.held);
    EXPECT_EQ(got.staging_bytes, 2 * chunk * elem + got.max_chunk * elem) << name;
    EXPECT_GT(got.host_copies, 0) << name;
  }
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}
#endif

INSTANTIATE_TEST_SUITE_P(Stores, HostOffloadTest,
#ifdef ZE_HAVE_NVME_OFFLOAD
                         ::testing::Values(Store::kHost, Store::kNvme),
#else
                         ::testing::Values(Store::kHost),  // ze_offload (liburing >= 2.3) not built: no NVMe store
#endif
                         [](const ::testing::TestParamInfo<Store>& i) { return std::string(key_of(i.param)); });

// Only the forced path moves the state off the compute backend: a CPU rank
// has no device memory to spare.
TEST(CpuOffloadTest, WithoutTheForcedPathCpuOffloadMovesNothingOnTheCpuBackend) {
  EngineConfig ec = config({2, DType::kF32, true, false}, Store::kHost, "");
  ec.force_offload_path = false;
  CpuBackend backend;
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->state().host_step(), nullptr);
  EXPECT_EQ((*e)->state().host_backend(), nullptr);
  EXPECT_EQ(backend.memory().at(Tier::kHost, MemCategory::kOptimizerState).current,
            12 * (*e)->state().state_store().numel());
}

}  // namespace
}  // namespace zero
