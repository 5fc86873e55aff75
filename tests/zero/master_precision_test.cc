// 16-bit master weights in the engine (DeepSpeed's
// bf16.bf16_master_weights_and_grads, with or without bf16_optimizer_states),
// on every rank count this binary runs with, at ZeRO stages 1-3 of a bf16
// model. What a user would notice:
//  * the run learns, and its master weights are bf16 values (every one
//    survives a round trip through bf16), equal to the model's weights;
//  * optimizer state takes 2 + 8 bytes per element of the partition (bf16
//    master, fp32 exp_avg and exp_avg_sq), or 2 + 4 with bf16 states, instead
//    of 12, and the planner's K says the same;
//  * where the state lives changes nothing: NVMe swap records (bf16 arrays in
//    them) and the host step of a GPU rank (forced on the CPU backend) train
//    bitwise like resident state, and the swap file is as long as the layout
//    with 2-byte arrays says;
//  * checkpoints resume bitwise, and load into an fp32-master run exactly
//    (bf16 values widen without loss).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "offload/swap_layout.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/model_state_bytes.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/zero/offload_test_util.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using namespace offload_test;  // kModel, base_config, train_steps, masters, parameters, ...

const OptimizerPrecision kBf16Master{DType::kBF16, DType::kF32};
const OptimizerPrecision kAllBf16{DType::kBF16, DType::kBF16};

std::string name_of(const OptimizerPrecision& p, int stage) {
  return cat("stage ", stage, ", ", dtype_name(p.master), " master, ", dtype_name(p.states), " states");
}

EngineConfig config(int stage, const OptimizerPrecision& p) {
  EngineConfig ec = base_config(stage, DType::kBF16);
  ec.optimizer_precision = p;
  return ec;
}

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> master, params;
  int64_t held = 0, host_optimizer_bytes = 0, nvme_bytes = 0;
};

Trained train(const EngineConfig& ec) {
  const int64_t optim0 = tracked(Tier::kHost, MemCategory::kOptimizerState);
  const int64_t nvme0 = tracked(Tier::kNvme, MemCategory::kOptimizerState);
  CpuBackend backend;
  auto engine = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  Trained out;
  train_steps(**engine, 0, kSteps, out.losses);
  out.master = masters(**engine);
  out.params = parameters(**engine);
  out.held = (*engine)->state().state_store().numel();
  out.host_optimizer_bytes = tracked(Tier::kHost, MemCategory::kOptimizerState) - optim0;
  out.nvme_bytes = tracked(Tier::kNvme, MemCategory::kOptimizerState) - nvme0;
  return out;
}

bool all_bf16(const std::vector<std::vector<float>>& values) {
  for (const auto& v : values)
    for (float x : v)
      if (bf16_to_float(float_to_bf16(x)) != x) return false;
  return true;
}

TEST(MasterPrecisionTest, SixteenBitMasterLearnsWithItsBytesAtEveryStage) {
  for (const OptimizerPrecision& p : {kBf16Master, kAllBf16}) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::string name = name_of(p, stage);
      const Trained fp32 = train(config(stage, {}));
      const Trained got = train(config(stage, p));
      ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << name;
      EXPECT_LT(got.losses.back(), got.losses.front()) << name << " learns";
      // The first step starts from the same weights: the same loss.
      EXPECT_EQ(got.losses.front(), fp32.losses.front()) << name;
      EXPECT_TRUE(all_bf16(got.master)) << name << ": the master weights are bf16 values";
      EXPECT_FALSE(all_bf16(fp32.master)) << "the fp32 master holds values bf16 cannot";
      EXPECT_EQ(got.params, got.master) << name << ": the model's weights are the master's";
      // K = 2 + 8 (or 2 + 4) bytes per element instead of 12; the planner's factor agrees.
      const int64_t k = p.states == DType::kBF16 ? 6 : 10;
      EXPECT_EQ(fp32.host_optimizer_bytes, 12 * fp32.held) << name;
      EXPECT_EQ(got.host_optimizer_bytes, k * got.held) << name;
      EXPECT_EQ(model_state_factors(config(stage, p)).optimizer_bytes, static_cast<double>(k)) << name;
    }
  }
}

#ifdef ZE_HAVE_NVME_OFFLOAD
TEST(MasterPrecisionTest, NvmeRecordsOfBf16ArraysTrainBitwiseLikeResidentState) {
  const std::string dir = shared_dir("master_precision_test.swap");
  for (const OptimizerPrecision& p : {kBf16Master, kAllBf16}) {
    for (int stage : {1, 3}) {
      const std::string name = name_of(p, stage);
      // Sub-groups of 3000: a bf16 array takes 2 pages of a record where an fp32 one takes 3.
      EngineConfig resident = config(stage, p);
      resident.zero.sub_group_size = 3000;
      const Trained ref = train(resident);
      EngineConfig ec = resident;
      offload_to(ec.zero.offload_optimizer, OffloadDevice::kNvme, dir, 3);
      const Trained got = train(ec);
      EXPECT_EQ(got.losses, ref.losses) << name;
      EXPECT_EQ(got.master, ref.master) << name;
      EXPECT_EQ(got.host_optimizer_bytes, 0) << name;
      const SwapLayout layout =
          SwapLayout::make(got.held, 3000, 3, 0, 2, static_cast<int64_t>(dtype_size(p.states)));
      EXPECT_EQ(got.nvme_bytes, layout.file_bytes()) << name;
      EXPECT_LT(layout.record_bytes(), SwapLayout::make(got.held, 3000, 3).record_bytes()) << name;
    }
  }
  EXPECT_TRUE(fs::is_empty(dir)) << dir;
}
#endif

// A GPU rank's ZeRO-Offload path (the host step, forced on the CPU backend).
TEST(MasterPrecisionTest, HostStepTrainsBitwiseLikeResidentState) {
  for (const OptimizerPrecision& p : {kBf16Master, kAllBf16}) {
    const Trained ref = train(config(2, p));
    EngineConfig ec = config(2, p);
    ec.force_offload_path = true;
    offload_to(ec.zero.offload_optimizer, OffloadDevice::kCpu, "", 0);
    const Trained got = train(ec);
    EXPECT_EQ(got.losses, ref.losses) << name_of(p, 2);
    EXPECT_EQ(got.master, ref.master) << name_of(p, 2);
  }
}

TEST(MasterPrecisionTest, CheckpointsResumeBitwiseAndLoadIntoAnFp32Master) {
  const std::string ckpt = fresh_checkpoint_dir("master_precision_test");
  CpuBackend backend;
  const Finished ref = train_saving_mid(config(3, kAllBf16), backend, ckpt);
  const Finished resumed = resume_mid_saving_end(config(3, kAllBf16), backend, ckpt, ref);
  EXPECT_EQ(resumed.losses, ref.losses);
  EXPECT_EQ(resumed.master, ref.master);
  EXPECT_EQ(resumed.params, ref.params);
  // bf16 values widen to fp32 exactly; another stage too.
  const Finished loaded = load_end(config(1, {}), backend, ckpt);
  EXPECT_EQ(loaded.master, ref.master);
  EXPECT_EQ(loaded.params, ref.params);
}

TEST(MasterPrecisionTest, StageZeroAndAnFp32ModelAreRefusedByKey) {
  CpuBackend backend;
  auto refusal = [&](const EngineConfig& ec) {
    auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
    return e.ok() ? std::string("ok") : std::string(e.status().message());
  };
  EXPECT_NE(refusal(config(0, kBf16Master)).find("only supported with ZeRO Stage 1, 2, or 3"), std::string::npos);
  EngineConfig fp32_model = config(1, kBf16Master);
  fp32_model.param_dtype = DType::kF32;
  EXPECT_NE(refusal(fp32_model).find("bf16.bf16_master_weights_and_grads: needs bf16.enabled true"),
            std::string::npos);
}

}  // namespace
}  // namespace zero
