// The ZeRO paper's model-state formulas (runtime/engine/model_state_bytes.h):
// Table 1 of the paper (7.5B, 128B, 1T parameters at DP 1-1024, stages P_os,
// P_os+g, P_os+g+p) within the paper's rounding, and the factors (2 + 2 + K)
// following the config: dtypes, stage 0's aliased master, every optimizer's
// state count (Adam 2, SGD 0 or 1 with momentum, Lion 1), ZeroEngine's own
// padding.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/engine/engine_config.h"
#include "runtime/engine/model_state_bytes.h"

namespace zero {
namespace {

// ---- the ZeRO paper's Table 1

struct PaperRow {
  double dp;
  double gb[3][3];  // [model: 7.5B, 128B, 1T][stage 1..3]
};

// deepspeed-behaviour.md §8, as printed in the paper (GB = 1e9 bytes).
const PaperRow kTable1[] = {
    {1, {{120, 120, 120}, {2048, 2048, 2048}, {16000, 16000, 16000}}},
    {4, {{52.5, 41.3, 30}, {896, 704, 512}, {7000, 5500, 4000}}},
    {16, {{35.6, 21.6, 7.5}, {608, 368, 128}, {4750, 2875, 1000}}},
    {64, {{31.4, 16.6, 1.88}, {536, 284, 32}, {4187, 2218, 250}}},
    {256, {{30.4, 15.4, 0.47}, {518, 263, 8}, {4046, 2054, 62.5}}},
    {1024, {{30.1, 15.1, 0.12}, {513, 257, 2}, {4011, 2013, 15.6}}},
};

// The unit of the last digit the paper prints for a value.
double printed_unit(double v) {
  if (v == std::floor(v)) return 1.0;
  if (v * 10 == std::floor(v * 10)) return 0.1;
  return 0.01;
}

TEST(MemoryPlanTest, ReproducesTheZeroPaperTable1) {
  const double psi[3] = {7.5e9, 128e9, 1e12};
  for (const PaperRow& row : kTable1) {
    for (int m = 0; m < 3; ++m) {
      for (int stage = 1; stage <= 3; ++stage) {
        const double gb = model_state_bytes(psi[m], static_cast<int64_t>(row.dp), stage).total() / 1e9;
        const double paper = row.gb[m][stage - 1];
        // The paper rounds to its last printed digit, or truncates (4187.5 -> 4187).
        EXPECT_LT(std::abs(gb - paper), printed_unit(paper))
            << psi[m] << " params, DP " << row.dp << ", stage " << stage << ": " << gb << " GB vs " << paper;
      }
    }
  }
  // The paper's example: GPT-2 1.5B needs 24 GB of model states without ZeRO.
  EXPECT_DOUBLE_EQ(model_state_bytes(1.5e9, 1, 0).total(), 24e9);
}

TEST(MemoryPlanTest, FactorsFollowTheConfig) {
  EngineConfig e;
  e.param_dtype = DType::kBF16;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 12);  // master + m + v
  e.param_dtype = DType::kF32;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 8);  // stage 0 fp32: the master is the parameters
  e.zero.stage = ZeroStage::k1;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 12);
  e.optimizer.type = OptimizerType::kSGD;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 4);
  e.optimizer.momentum = 0.9f;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 8);
  // Lion: one state (exp_avg) beside the master.
  e.optimizer = OptimizerConfig{.type = OptimizerType::kLion};
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 8);  // stage 1 fp32: master + exp_avg
  e.zero.stage = ZeroStage::k0;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 4);  // stage 0 fp32: exp_avg only
  e.param_dtype = DType::kBF16;
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 8);
  e.zero.stage = ZeroStage::k2;
  e.optimizer_precision = {DType::kBF16, DType::kBF16};
  EXPECT_EQ(model_state_factors(e).optimizer_bytes, 4);  // bf16 master + bf16 exp_avg
  // DeepSpeed's padding: 2W at stages 1-2.
  e = EngineConfig();
  e.param_dtype = DType::kBF16;
  const ModelStateBytes b = engine_model_state_bytes(1001, 4, 1, e);
  EXPECT_EQ(b.parameters, 2 * 1008);
  EXPECT_EQ(b.optimizer_state, 12 * 1008 / 4);
}

}  // namespace
}  // namespace zero
