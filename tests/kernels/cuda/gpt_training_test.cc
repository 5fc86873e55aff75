// Training on the GPU follows training on the CPU, and the GPU's tracked
// memory is what the driver reports.
//
//  * A small GPT trains for 20 steps on the CPU backend and on the CUDA
//    backend through the engine, from the same initial weights (initial values
//    are a pure function of seed, parameter name and element index, so both
//    backends start bit for bit the same) and the same batches: fp32 and bf16
//    at ZeRO stage 0, and bf16 at stage 3 (one rank: the coordinator's gather
//    and release paths on device memory). Per step, the loss and the global
//    gradient norm must agree within the tolerances below, and the loss must
//    fall, so the comparison is of two runs that learn.
//  * The same with ZeRO-Offload (offload_optimizer "cpu" at stages 1-3, and
//    offload_param "cpu" at stage 3; zero/host_step.h): the optimizer runs on
//    the CPU, on gradients copied off the GPU, and the new weights go back;
//    the CPU run (where "cpu" moves nothing) is the reference. The optimizer
//    state must then be in host memory only: 12 bytes per element of the
//    partition on the host backend, none on the device. With "nvme"
//    (ZeRO-Infinity: the same host step over the NVMe store) it is in the
//    swap file: none in memory on either backend; the CPU run steps the NVMe
//    store on its own backend.
//  * activation_checkpointing.cpu_checkpointing: the same, with segment
//    inputs in pinned host memory between forward and recompute, and exactly
//    those bytes off the device after a forward.
//  * A GPT of 164M parameters on the GPU only: after a warm-up run (which
//    loads every kernel and cuBLAS's heuristics) the growth of cudaMemGetInfo's
//    used bytes over a fresh run equals the growth of the tracked reserved
//    device bytes, within the driver's page rounding.
//
// Every test skips itself without a CUDA device. The memory test must not
// share the GPU with another process (ctest runs it RUN_SERIAL).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/hash.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "runtime/engine/engine.h"
#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kMicroBatch = 8;
const GptConfig kModel{.n_layer = 2, .n_head = 4, .d_model = 128, .vocab_size = 512, .seq_len = 64};

// Tolerances, relative to the CPU value, per step, for the loss and for the
// global gradient norm (which sees every parameter's gradient, so a backward
// bug shows there first).
//
// Step 1 runs on bit-identical weights, so only the order of floating-point
// sums differs (cuBLAS vs oneDNN blocking, warp vs SIMD reductions, CUDA's
// expf/tanhf vs ours; no TF32, see kernels/cuda/gemm.h): fp32 agrees to
// ~1e-7 in the loss (an average over 512 tokens) and ~1e-6 in the norm; we
// allow 1e-5 and 1e-4. In bf16 the fp32 activations are rounded to 8
// significant bits as each GEMM reads them, so an element whose fp32 value
// differs in its last bits may round to the neighbouring bf16 value (0.4 %
// of that element): allow 1e-3 and 1e-2.
//
// Over the 20 steps AdamW feeds the differences back (its early steps move
// each weight by about lr whatever the gradient's size), so they grow.
// Measured on the CPU with this model and data as proxies: scaling the fp32
// gradients by 1 + 2^-20 (a rounding-sized change) moves the losses by at most
// 2e-6 and the norms by 1.7e-5 over the 20 steps; bf16 against fp32 differs
// by at most 1.2e-3 in loss and 2.1e-2 in norm. bf16 on two backends rounds at
// the same points, so it differs less than bf16 from fp32. Allowed: fp32 1e-3
// (50x the proxy in the norm), bf16 1e-2 in loss and 5e-2 in norm. A kernel
// bug (a wrong gradient in one layer, a dropped bias, a transposed operand)
// moves these by percents within a step or two. The worst cases are printed,
// to tighten the bounds from GPU runs.
struct Tolerance {
  double loss_first, norm_first;  // step 1
  double loss_all, norm_all;      // every step
};
constexpr Tolerance kFp32Tolerance{1e-5, 1e-4, 1e-3, 1e-3};
constexpr Tolerance kBf16Tolerance{1e-3, 1e-2, 1e-2, 5e-2};

// A learnable stream: each row counts up by a row-dependent stride from a
// random start, so the next token follows from the previous two. Batches
// differ per step and are the same for every backend.
struct Batches {
  std::vector<std::vector<int32_t>> ids, targets;
  Batches(int steps, int64_t rows, const GptConfig& g) : ids(steps), targets(steps) {
    for (int s = 0; s < steps; ++s) {
      for (int64_t r = 0; r < rows; ++r) {
        const uint64_t h = splitmix64(static_cast<uint64_t>(s) * 1000003u + static_cast<uint64_t>(r));
        const int64_t start = static_cast<int64_t>(h % static_cast<uint64_t>(g.vocab_size));
        const int64_t stride = 1 + static_cast<int64_t>((h >> 32) % 3);
        for (int64_t t = 0; t < g.seq_len; ++t) {
          ids[s].push_back(static_cast<int32_t>((start + stride * t) % g.vocab_size));
          targets[s].push_back(static_cast<int32_t>((start + stride * (t + 1)) % g.vocab_size));
        }
      }
    }
  }
  Batch at(int step, int64_t rows, const GptConfig& g) {
    return {Tensor::wrap(ids[step].data(), {rows, g.seq_len}, DType::kI32),
            Tensor::wrap(targets[step].data(), {rows, g.seq_len}, DType::kI32)};
  }
};

EngineConfig training_config(DType dtype, int stage, bool offload_optimizer = false, bool offload_params = false,
                             bool nvme = false) {
  EngineConfig ec;
  const OffloadDevice device = nvme ? OffloadDevice::kNvme : OffloadDevice::kCpu;
  if (offload_optimizer) ec.zero.offload_optimizer.device = device;
  if (offload_params) ec.zero.offload_param.device = device;
  if (nvme) ec.zero.offload_optimizer.nvme_path = ec.zero.offload_param.nvme_path = ::testing::TempDir();
  ec.param_dtype = dtype;
  ec.micro_batch_size = kMicroBatch;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .weight_decay = 0.01f};
  ec.gradient_clipping = 1.0f;
  ec.zero.stage = zero_stage(stage);
  ec.seed = 42;
  return ec;
}

struct Trajectory {
  std::vector<float> loss;
  std::vector<double> grad_norm;
  int64_t partition = 0;                // elements of this rank's optimizer partition
  int64_t compute_optimizer_bytes = 0;  // optimizer state on the backend trained on
  int64_t host_optimizer_bytes = -1;    // on its ZeRO-Offload host backend (-1: none)
};

Trajectory train(Backend& backend, const GptConfig& g, const EngineConfig& ec, Batches& data, int steps) {
  Trajectory t;
  absl::StatusOr<std::unique_ptr<Engine>> engine = initialize(std::make_unique<Gpt>(g), ec, backend);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return t;
  for (int s = 0; s < steps; ++s) {
    (*engine)->forward(data.at(s, ec.micro_batch_size, g)).value();
    const absl::Status b = (*engine)->backward();
    EXPECT_TRUE(b.ok()) << b;
    absl::StatusOr<StepResult> r = (*engine)->step();
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return t;
    EXPECT_TRUE(r->boundary && !r->skipped) << "step " << s + 1;
    t.loss.push_back(r->loss);
    t.grad_norm.push_back(r->grad_norm);
  }
  const ModelState& state = (*engine)->state();
  t.partition = (*engine)->state().state_store().numel();
  t.compute_optimizer_bytes = backend.memory().at(backend.compute_tier(), MemCategory::kOptimizerState).current;
  if (state.host_backend() != nullptr) {
    t.host_optimizer_bytes = state.host_backend()->memory().at(Tier::kHost, MemCategory::kOptimizerState).current;
  }
  return t;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

struct Case {
  const char* name;
  DType dtype;
  int stage;
  Tolerance tol;
  bool offload_optimizer = false;  // ZeRO-Offload on the GPU run
  bool offload_params = false;
  bool nvme = false;  // the offload device is "nvme" (ZeRO-Infinity), not "cpu"
};

// gtest prints the parameter in test listings (and so in ctest's test names).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GpuTrainingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << cuda_test::kNoDeviceMessage;
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::create(0);
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = *std::move(b);
  }
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_P(GpuTrainingTest, LossesAndGradNormsFollowTheCpu) {
  const Case& c = GetParam();
  Batches data(kSteps, kMicroBatch, kModel);
  const EngineConfig ec = training_config(c.dtype, c.stage, c.offload_optimizer, c.offload_params, c.nvme);
  CpuBackend cpu;
  const Trajectory want = train(cpu, kModel, ec, data, kSteps);
  const Trajectory got = train(*gpu_, kModel, ec, data, kSteps);
  ASSERT_EQ(want.loss.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.loss.size(), static_cast<size_t>(kSteps));

  double worst_loss = 0, worst_norm = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double loss_bound = s == 0 ? c.tol.loss_first : c.tol.loss_all;
    const double norm_bound = s == 0 ? c.tol.norm_first : c.tol.norm_all;
    const double dl = relative(got.loss[s], want.loss[s]), dn = relative(got.grad_norm[s], want.grad_norm[s]);
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    EXPECT_LE(dl, loss_bound) << c.name << " step " << s + 1 << ": loss cuda " << got.loss[s] << " vs cpu "
                              << want.loss[s];
    EXPECT_LE(dn, norm_bound) << c.name << " step " << s + 1 << ": grad norm cuda " << got.grad_norm[s]
                              << " vs cpu " << want.grad_norm[s];
  }
  // Both runs learn: from ln(512) = 6.24 to about 4.3 on the CPU in 20 steps.
  EXPECT_LT(want.loss.back(), 0.8f * want.loss.front()) << c.name << " (cpu)";
  EXPECT_LT(got.loss.back(), 0.8f * got.loss.front()) << c.name << " (cuda)";
  std::printf("%s: loss %.4f -> %.4f (cpu) / %.4f -> %.4f (cuda); worst relative difference over %d steps: "
              "loss %.2e, grad norm %.2e (first step %.2e / %.2e)\n",
              c.name, want.loss.front(), want.loss.back(), got.loss.front(), got.loss.back(), kSteps, worst_loss,
              worst_norm, relative(got.loss[0], want.loss[0]), relative(got.grad_norm[0], want.grad_norm[0]));
  if (c.offload_optimizer) {
    // Master, exp_avg, exp_avg_sq in host memory (or in the swap file);
    // nothing of them on the GPU.
    EXPECT_EQ(got.compute_optimizer_bytes, 0) << c.name;
    EXPECT_EQ(got.host_optimizer_bytes, c.nvme ? 0 : 12 * got.partition) << c.name;
  } else {
    EXPECT_EQ(got.host_optimizer_bytes, -1) << c.name;
  }
  RecordProperty("worst_relative_loss_difference", std::to_string(worst_loss));
  RecordProperty("worst_relative_grad_norm_difference", std::to_string(worst_norm));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuTrainingTest,
                         ::testing::Values(Case{"fp32_stage0", DType::kF32, 0, kFp32Tolerance},
                                           Case{"bf16_stage0", DType::kBF16, 0, kBf16Tolerance},
                                           Case{"bf16_stage3", DType::kBF16, 3, kBf16Tolerance},
                                           // ZeRO-Offload: the step on the CPU, on one rank.
                                           Case{"fp32_stage1_cpu_offload", DType::kF32, 1, kFp32Tolerance, true},
                                           Case{"bf16_stage2_cpu_offload", DType::kBF16, 2, kBf16Tolerance, true},
                                           Case{"bf16_stage3_cpu_offload", DType::kBF16, 3, kBf16Tolerance, true},
                                           Case{"bf16_stage3_cpu_offload_params", DType::kBF16, 3, kBf16Tolerance,
                                                true, true},
                                           // ZeRO-Infinity: the same step over the NVMe store.
                                           Case{"bf16_stage2_nvme_offload", DType::kBF16, 2, kBf16Tolerance, true,
                                                false, true},
                                           Case{"bf16_stage3_nvme_offload_params", DType::kBF16, 3, kBf16Tolerance,
                                                true, true, true}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// activation_checkpointing.cpu_checkpointing on the GPU: each segment's input
// goes to pinned host memory after the segment's forward and comes back
// (prefetched one segment ahead) for its recompute (graph/context.h).
// The run follows the CPU's (where the key moves nothing) within fp32's
// bounds, at stages 0 and 3; after a forward the device holds the K segment
// inputs less than with checkpointing alone, and pinned host memory holds
// exactly them.
TEST_F(GpuTrainingTest, CpuCheckpointingFollowsTheCpuWithSegmentInputsInPinnedMemory) {
  constexpr int64_t kSegments = 2;
  const int64_t input_bytes = kMicroBatch * kModel.seq_len * kModel.d_model * 4;
  Batches data(kSteps, kMicroBatch, kModel);
  for (int stage : {0, 3}) {
    EngineConfig ec = training_config(DType::kF32, stage);
    ec.activation_checkpointing.number_checkpoints = kSegments;
    ec.activation_checkpointing.cpu_checkpointing = true;
    CpuBackend cpu;
    const Trajectory want = train(cpu, kModel, ec, data, kSteps);
    const Trajectory got = train(*gpu_, kModel, ec, data, kSteps);
    ASSERT_EQ(want.loss.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(got.loss.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      const Tolerance& tol = kFp32Tolerance;
      EXPECT_LE(relative(got.loss[s], want.loss[s]), s == 0 ? tol.loss_first : tol.loss_all)
          << "stage " << stage << " step " << s + 1 << ": loss cuda " << got.loss[s] << " vs cpu " << want.loss[s];
      EXPECT_LE(relative(got.grad_norm[s], want.grad_norm[s]), s == 0 ? tol.norm_first : tol.norm_all)
          << "stage " << stage << " step " << s + 1 << ": grad norm cuda " << got.grad_norm[s] << " vs cpu "
          << want.grad_norm[s];
    }
    EXPECT_LT(got.loss.back(), 0.8f * got.loss.front()) << "stage " << stage << " (cuda)";

    // Activations by tier after one forward, with and without the key.
    auto after_forward = [&](bool cpu_checkpointing) -> std::pair<int64_t, int64_t> {
      EngineConfig e = ec;
      e.activation_checkpointing.cpu_checkpointing = cpu_checkpointing;
      absl::StatusOr<std::unique_ptr<Engine>> engine = initialize(std::make_unique<Gpt>(kModel), e, *gpu_);
      EXPECT_TRUE(engine.ok()) << engine.status();
      if (!engine.ok()) return {-1, -1};
      EXPECT_EQ((*engine)->checkpoint_host_backend(), cpu_checkpointing ? gpu_.get() : nullptr);
      const MemorySnapshot before = gpu_->memory();
      (*engine)->forward(data.at(0, kMicroBatch, kModel)).value();
      const MemorySnapshot after = gpu_->memory();
      auto grown = [&](Tier t) {
        return after.at(t, MemCategory::kActivations).current - before.at(t, MemCategory::kActivations).current;
      };
      const std::pair<int64_t, int64_t> out{grown(Tier::kDevice), grown(Tier::kHost)};
      EXPECT_TRUE((*engine)->backward().ok());
      EXPECT_EQ(gpu_->memory().at(Tier::kHost, MemCategory::kActivations).current,
                before.at(Tier::kHost, MemCategory::kActivations).current)
          << "pinned segment inputs outlive backward";
      return out;
    };
    const auto [alone_device, alone_host] = after_forward(false);
    const auto [offloaded_device, offloaded_host] = after_forward(true);
    EXPECT_EQ(alone_host, 0) << "stage " << stage;
    EXPECT_EQ(offloaded_host, kSegments * input_bytes) << "stage " << stage;
    EXPECT_EQ(alone_device - offloaded_device, kSegments * input_bytes) << "stage " << stage;
    std::printf("cpu_checkpointing, stage %d: loss %.4f -> %.4f (cuda), device activations after forward %lld B "
                "(checkpointing alone %lld B), pinned host %lld B\n",
                stage, got.loss.front(), got.loss.back(), static_cast<long long>(offloaded_device),
                static_cast<long long>(alone_device), static_cast<long long>(offloaded_host));
  }
}

// The driver maps device memory in pages of 2 MiB, so every block the caching
// allocator holds from cudaMalloc may occupy up to one page more than it
// asked for; on top of that we allow 32 MiB for what the driver itself maps
// while the run goes on. The tracked growth must also dwarf that margin, so
// the check would notice an untracked buffer of a few percent of the run.
constexpr int64_t kDriverPageBytes = int64_t{2} << 20;
constexpr int64_t kDriverSlackBytes = int64_t{32} << 20;

TEST_F(GpuTrainingTest, TrackedDeviceMemoryMatchesTheDriver) {
  // 164M parameters in few layers (few, large blocks): 16 bytes each of fp32
  // model state (parameters, gradients, Adam's m and v), 2.6 GB before
  // activations.
  const GptConfig g{.n_layer = 4, .n_head = 12, .d_model = 1536, .vocab_size = 32768, .seq_len = 256};
  const EngineConfig ec = training_config(DType::kF32, 0);
  Batches data(2, kMicroBatch, g);
  train(*gpu_, g, ec, data, 2);  // warm-up: every kernel and cuBLAS heuristic the run needs is loaded
  gpu_->release_cached();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  auto tracked = [] { return MemoryTracker::global().snapshot().reserved[static_cast<int>(Tier::kDevice)].current; };
  const int64_t driver0 = *gpu_->device_memory_in_use(), tracked0 = tracked();
  const size_t blocks0 = gpu_->device_driver_blocks();
  int64_t driver1 = 0, tracked1 = 0;
  size_t blocks1 = 0;
  {
    absl::StatusOr<std::unique_ptr<Engine>> engine = initialize(std::make_unique<Gpt>(g), ec, *gpu_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (int s = 0; s < 2; ++s) {
      (*engine)->forward(data.at(s, kMicroBatch, g)).value();
      ASSERT_TRUE((*engine)->backward().ok());
      ASSERT_TRUE((*engine)->step().ok());
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    driver1 = *gpu_->device_memory_in_use();
    tracked1 = tracked();
    blocks1 = gpu_->device_driver_blocks();
  }
  const int64_t driver_growth = driver1 - driver0, tracked_growth = tracked1 - tracked0;
  const int64_t new_blocks = static_cast<int64_t>(blocks1) - static_cast<int64_t>(blocks0);
  const int64_t margin = kDriverSlackBytes + kDriverPageBytes * std::max<int64_t>(new_blocks, 0);
  std::printf("device memory over a run: driver +%s, tracked reserved +%s (difference %s); %lld new cudaMalloc "
              "blocks, margin %s\n",
              format_bytes(driver_growth).c_str(), format_bytes(tracked_growth).c_str(),
              format_bytes(driver_growth - tracked_growth).c_str(), static_cast<long long>(new_blocks),
              format_bytes(margin).c_str());
  RecordProperty("driver_growth_bytes", std::to_string(driver_growth));
  RecordProperty("tracked_growth_bytes", std::to_string(tracked_growth));
  EXPECT_GT(tracked_growth, int64_t{1} << 30) << "the run should hold over 1 GiB of device memory";
  EXPECT_LE(std::abs(driver_growth - tracked_growth), margin)
      << "cudaMemGetInfo grew by " << driver_growth << " bytes, the tracked reserved device bytes by "
      << tracked_growth;
  EXPECT_LT(margin, tracked_growth / 4) << "the margin must be small against what it checks";
}

}  // namespace
}  // namespace zero
