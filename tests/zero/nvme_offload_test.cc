// Optimizer state on NVMe (offload_optimizer.device = "nvme"), and at stage 3
// the parameters too (offload_param.device = "nvme"), or the parameters alone
// (their own swap file, the optimizer state resident), train exactly what
// resident state trains: on every rank count this binary runs
// with, at stages 1-3, in fp32 and bf16, with 1 to 4 swap buffers and
// sub-groups much smaller than a partition, the losses and the fp32 master
// weights are bitwise those of the same run without offload (the same Adam
// kernel runs on the same values, only sub-group by sub-group out of a swap
// file). Host optimizer-state bytes drop by exactly the offloaded bytes, the
// swap buffers and the swap file are accounted for, the file is gone when the
// engine is, and checkpoints move between offloaded and resident runs.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/memory_tracker.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/swap_layout.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/zero/offload_test_util.h"
#include "zero/stage3_model_state.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using namespace offload_test;  // kModel, Rows, base_config, train_steps, masters, ...

struct RunSetup {
  int stage = 1;
  DType dtype = DType::kF32;
  bool nvme = false;
  int64_t buffers = 4;
  bool nvme_params = false;
  int64_t param_buffers = 5;
  int64_t param_buffer_size = 0;  // offload_param.buffer_size (elements); 0: the default
  std::string name() const {
    return cat("stage ", stage, " ", dtype_name(dtype), nvme ? cat(" nvme x", buffers) : std::string(" resident"),
               nvme_params ? cat(" + parameters x", param_buffers) : std::string(),
               param_buffer_size > 0 ? cat(" (records of ", param_buffer_size, ")") : std::string());
  }
};

EngineConfig config(const RunSetup& s, const std::string& swap_dir) {
  EngineConfig ec = base_config(s.stage, s.dtype);
  if (s.nvme) offload_to(ec.zero.offload_optimizer, OffloadDevice::kNvme, swap_dir, s.buffers);
  if (s.nvme_params) offload_params_to(ec, OffloadDevice::kNvme, swap_dir, s.param_buffers);
  if (s.param_buffer_size > 0) ec.zero.offload_param.buffer_size = s.param_buffer_size;
  return ec;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> master;
  int64_t host_optimizer_bytes = 0, swap_buffer_bytes = 0, nvme_bytes = 0, held = 0, host_parameter_bytes = 0;
  int64_t nvme_parameter_bytes = 0;
  std::vector<std::vector<float>> params;  // as the model sees them, gathered
  int64_t prefetches = 0, max_chunk = 0;
};

Trained train(const RunSetup& s, const std::string& swap_dir) {
  const int64_t nvme0 = tracked(Tier::kNvme, MemCategory::kOptimizerState);
  const int64_t nvme_param0 = tracked(Tier::kNvme, MemCategory::kParameters);
  const int64_t swap0 = tracked(Tier::kHost, MemCategory::kSwapBuffers);
  const int64_t optim0 = tracked(Tier::kHost, MemCategory::kOptimizerState);
  const int64_t param0 = tracked(Tier::kHost, MemCategory::kParameters);
  CpuBackend backend;
  auto engine = initialize(std::make_unique<Gpt>(kModel), config(s, swap_dir), backend, &world());
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  Trained out;
  train_steps(**engine, 0, kSteps, out.losses);
  out.master = masters(**engine);
  out.params = parameters(**engine);
  out.nvme_parameter_bytes = tracked(Tier::kNvme, MemCategory::kParameters) - nvme_param0;
  out.host_optimizer_bytes = tracked(Tier::kHost, MemCategory::kOptimizerState) - optim0;
  out.swap_buffer_bytes = tracked(Tier::kHost, MemCategory::kSwapBuffers) - swap0;
  out.nvme_bytes = tracked(Tier::kNvme, MemCategory::kOptimizerState) - nvme0;
  out.held = (*engine)->state().state_store().numel();
  for (Parameter* p : (*engine)->model().parameters()) {
    out.max_chunk = std::max(out.max_chunk, (p->numel() + world().world_size() - 1) / world().world_size());
  }
  out.host_parameter_bytes = tracked(Tier::kHost, MemCategory::kParameters) - param0;
  if (s.stage == 3) out.prefetches = dynamic_cast<Stage3ModelState&>((*engine)->state()).coordinator().prefetches();
  return out;
}

TEST(NvmeOffloadTest, TrainsBitwiseLikeResidentStateAtEveryStage) {
  const std::string dir = shared_dir("nvme_offload_test.swap");
  for (int stage : {1, 2, 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const RunSetup resident{stage, dtype, false};
      const Trained ref = train(resident, dir);
      for (int64_t buffers : {1, 2, 4}) {
        if (dtype == DType::kBF16 && buffers != 4) continue;  // the buffer count is dtype-blind
        const RunSetup offloaded{stage, dtype, true, buffers};
        const Trained got = train(offloaded, dir);
        EXPECT_EQ(got.losses, ref.losses) << offloaded.name();
        EXPECT_EQ(got.master, ref.master) << offloaded.name();
        // Master + exp_avg + exp_avg_sq of this rank's partition left host memory.
        EXPECT_EQ(ref.host_optimizer_bytes - got.host_optimizer_bytes, 12 * ref.held) << offloaded.name();
        EXPECT_EQ(got.host_optimizer_bytes, 0) << offloaded.name();
        const SwapLayout layout = SwapLayout::make(got.held, kSubGroup, 3);
        EXPECT_EQ(got.swap_buffer_bytes, layout.buffer_bytes(buffers)) << offloaded.name();
        EXPECT_EQ(got.nvme_bytes, layout.file_bytes()) << offloaded.name();
      }
      EXPECT_LT(ref.losses.back(), ref.losses.front()) << resident.name() << " learns";
    }
  }
  // Every engine is gone: so is every swap file.
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

TEST(NvmeOffloadTest, ParametersOnNvmeTrainBitwiseLikeResidentParameters) {
  const std::string dir = shared_dir("nvme_offload_test.swap3");
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const RunSetup resident{3, dtype, false};
    const Trained ref = train(resident, dir);
    // 1 read buffer: every prefetch is skipped and each fetch waits for the
    // oldest read; 2 and 5: reads run ahead of their all-gathers.
    for (int64_t param_buffers : {1, 2, 5}) {
      RunSetup offloaded{3, dtype, true, 3, true, param_buffers};
      const Trained got = train(offloaded, dir);
      EXPECT_EQ(got.losses, ref.losses) << offloaded.name();
      EXPECT_EQ(got.master, ref.master) << offloaded.name();
      // The parameter shard left host memory (nothing persists: threshold 0).
      const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
      EXPECT_EQ(ref.host_parameter_bytes - got.host_parameter_bytes, ref.held * elem) << offloaded.name();
      EXPECT_EQ(got.host_parameter_bytes, 0) << offloaded.name();
      const SwapLayout layout = SwapLayout::make(got.held, kSubGroup, 3, elem);
      // One file: its parameter arrays count as parameters, the rest as optimizer state.
      const int64_t shard_bytes = layout.groups() * layout.param_stride_bytes();
      EXPECT_EQ(got.nvme_bytes, layout.file_bytes() - shard_bytes) << offloaded.name();
      EXPECT_EQ(got.nvme_parameter_bytes, shard_bytes) << offloaded.name();
      // Record buffers for the step, read buffers for the largest chunk.
      EXPECT_EQ(got.swap_buffer_bytes,
                layout.buffer_bytes(3) + param_buffers * layout.param_read_buffer_bytes(got.max_chunk))
          << offloaded.name();
      if (param_buffers > 1) EXPECT_GT(got.prefetches, 0) << offloaded.name();
    }
  }
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

// offload_param "nvme" without offload_optimizer "nvme" (DeepSpeed allows it):
// the optimizer state stays in memory and the shard has a swap file of its
// own, in records of offload_param.buffer_size elements that do not line up
// with the sub-groups (so the step cuts ranges at record boundaries).
TEST(NvmeOffloadTest, ParametersAloneOnNvmeTrainBitwiseLikeResidentParameters) {
  const std::string dir = shared_dir("nvme_offload_test.swap4");
  constexpr int64_t kRecord = 1100;  // elements: above the largest chunk, below the shard
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const RunSetup resident{3, dtype, false};
    const Trained ref = train(resident, dir);
    for (int64_t param_buffers : {1, 2, 5}) {
      const RunSetup offloaded{3, dtype, false, 4, true, param_buffers, kRecord};
      const Trained got = train(offloaded, dir);
      EXPECT_EQ(got.losses, ref.losses) << offloaded.name();
      EXPECT_EQ(got.master, ref.master) << offloaded.name();
      EXPECT_EQ(got.params, ref.params) << offloaded.name();
      // The shard left host memory; the optimizer state did not move.
      const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
      EXPECT_EQ(ref.host_parameter_bytes - got.host_parameter_bytes, ref.held * elem) << offloaded.name();
      EXPECT_EQ(got.host_optimizer_bytes, ref.host_optimizer_bytes) << offloaded.name();
      EXPECT_EQ(got.nvme_bytes, 0) << offloaded.name();
      const SwapLayout layout = param_swap_layout(got.held, kRecord, elem);
      ASSERT_GT(layout.groups(), 2) << offloaded.name();
      EXPECT_EQ(got.nvme_parameter_bytes, layout.file_bytes()) << offloaded.name();
      EXPECT_EQ(got.swap_buffer_bytes, kParamWriteBuffers * layout.record_bytes() +
                                           param_buffers * layout.param_read_buffer_bytes(got.max_chunk))
          << offloaded.name();
      if (param_buffers > 1) EXPECT_GT(got.prefetches, 0) << offloaded.name();
    }
  }
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

TEST(NvmeOffloadTest, ParameterFileTooSmallABufferSizeIsRefusedByKey) {
  const std::string dir = shared_dir("nvme_offload_test.swap5");
  CpuBackend backend;
  const RunSetup s{3, DType::kF32, false, 4, true, 2, 100};  // below the largest chunk
  auto engine = initialize(std::make_unique<Gpt>(kModel), config(s, dir), backend, &world());
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("zero_optimization.offload_param.buffer_size: 100 elements is smaller"),
            std::string::npos)
      << engine.status();
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}

TEST(NvmeOffloadTest, CheckpointsMoveBetweenParametersOnNvmeAndResidentRuns) {
  const std::string swap = shared_dir("nvme_offload_test.swap6");
  const std::string ckpt = fresh_checkpoint_dir("nvme_offload_test_params");
  CpuBackend backend;
  const Finished ref = train_saving_mid(config({3, DType::kBF16, false}, swap), backend, ckpt);
  const RunSetup params_on_nvme{3, DType::kBF16, false, 4, true, 2, 1100};
  const Finished resumed = resume_mid_saving_end(config(params_on_nvme, swap), backend, ckpt, ref);
  EXPECT_EQ(resumed.losses, ref.losses);
  EXPECT_EQ(resumed.master, ref.master);
  EXPECT_EQ(resumed.params, ref.params);
  const Finished loaded = load_end(config({3, DType::kBF16, false}, swap), backend, ckpt);
  EXPECT_EQ(loaded.master, ref.master);
  EXPECT_EQ(loaded.params, ref.params);
  EXPECT_TRUE(fs::is_empty(swap)) << swap;
}

TEST(NvmeOffloadTest, CheckpointsMoveBetweenOffloadedAndResidentRuns) {
  const std::string swap = shared_dir("nvme_offload_test.swap2");
  const std::string ckpt = fresh_checkpoint_dir("nvme_offload_test");
  CpuBackend backend;
  // Resident run: 3 steps, save, 2 more steps.
  const Finished ref = train_saving_mid(config({2, DType::kF32, false}, swap), backend, ckpt);
  // An offloaded run resumes it and finishes bitwise the same way, then saves.
  const Finished resumed = resume_mid_saving_end(config({2, DType::kF32, true, 3}, swap), backend, ckpt, ref);
  EXPECT_EQ(resumed.losses, ref.losses);
  EXPECT_EQ(resumed.master, ref.master);
  // Its checkpoint loads into a resident run at another stage exactly.
  EXPECT_EQ(load_end(config({3, DType::kF32, false}, swap), backend, ckpt).master, ref.master);
  EXPECT_TRUE(fs::is_empty(swap)) << swap;
}

}  // namespace
}  // namespace zero
