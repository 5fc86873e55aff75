// 16-bit master weights and optimizer states (DeepSpeed's
// bf16.bf16_master_weights_and_grads, bf16_optimizer_states and
// fp16.fp16_master_weights_and_grads): one step over bf16/fp16 arrays equals,
// bit for bit, the fp32 step over their widened values followed by
// round-to-nearest-even back to 16 bits — DeepSpeed's CPU Adam arithmetic
// (load 16-bit into fp32, update in fp32, store rounded to nearest). Sizes
// span several of the optimizer's widening pieces (kNarrowStepElems) with a
// ragged end, for Adam, AdamW, SGD with momentum and Lion; the fused 16-bit weights
// equal the new master bit for bit. The precision rules name their keys.
#include <gtest/gtest.h>

#include <random>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/optimizer.h"

namespace zero {
namespace {

constexpr int64_t kN = 2 * kNarrowStepElems + 1234;

// A host tensor of n values drawn from [lo, hi), stored in `dtype` (rounded).
Tensor random_tensor(CpuBackend& b, DType dtype, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(kN));
  for (float& x : v) x = d(rng);
  Tensor t = b.empty({kN}, dtype, MemCategory::kOptimizerState);
  for (int64_t i = 0; i < kN; ++i) store_from_float(t.data(), dtype, static_cast<size_t>(i), v[static_cast<size_t>(i)]);
  return t;
}

Tensor cast_to(CpuBackend& b, const Tensor& t, DType dtype) {
  Tensor out = b.empty({t.numel()}, dtype, MemCategory::kWorkspace);
  b.ops().cast(t, out);
  return out;
}

std::vector<uint16_t> bits16(const Tensor& t) {
  const auto* p = static_cast<const uint16_t*>(t.data());
  return {p, p + t.numel()};
}

struct Case {
  const char* name;
  OptimizerConfig optimizer;
  OptimizerPrecision precision;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class NarrowStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(NarrowStepTest, EqualsTheFp32StepRoundedToNearestEven) {
  const Case& c = GetParam();
  CpuBackend b;
  const DType master_t = c.precision.master, states_t = c.precision.states;
  auto narrow = make_optimizer(c.optimizer, b, c.precision);
  auto wide = make_optimizer(c.optimizer, b);
  ASSERT_TRUE(narrow.ok() && wide.ok());
  const size_t nstates = (*narrow)->state_names().size();

  Tensor master = random_tensor(b, master_t, -1.0f, 1.0f, 1);
  std::vector<Tensor> states;
  for (size_t i = 0; i < nstates; ++i) states.push_back(random_tensor(b, states_t, i == 1 ? 0.0f : -0.1f, 0.1f, 2 + i));
  const Tensor grad = random_tensor(b, master_t, -0.5f, 0.5f, 9);
  // The reference: the same values widened to fp32.
  Tensor wide_master = cast_to(b, master, DType::kF32);
  std::vector<Tensor> wide_states;
  for (const Tensor& s : states) wide_states.push_back(cast_to(b, s, DType::kF32));

  Optimizer::StepArgs args;
  args.step = 3;
  args.lr = 1e-2f;
  args.grad_scale = 0.5f;
  Tensor param_out = b.empty({kN}, master_t, MemCategory::kParameters);
  (*narrow)->step(master, grad, states, param_out, args);
  (*wide)->step(wide_master, grad, wide_states, Tensor(), args);

  EXPECT_EQ(bits16(master), bits16(cast_to(b, wide_master, master_t))) << "master";
  for (size_t i = 0; i < nstates; ++i) {
    if (states_t == DType::kF32) {
      const auto* got = states[i].f32();
      const auto* want = wide_states[i].f32();
      EXPECT_TRUE(std::equal(got, got + kN, want)) << "state " << i;
    } else {
      EXPECT_EQ(bits16(states[i]), bits16(cast_to(b, wide_states[i], states_t))) << "state " << i;
    }
  }
  EXPECT_EQ(bits16(param_out), bits16(master)) << "the model's weights are the master's values";
  // Something moved: the step is not a no-op.
  const Tensor before = random_tensor(b, master_t, -1.0f, 1.0f, 1);
  EXPECT_NE(bits16(before), bits16(master));
}

OptimizerConfig adam(bool adamw) {
  OptimizerConfig o;
  o.type = adamw ? OptimizerType::kAdamW : OptimizerType::kAdam;
  o.adam_w_mode = adamw;
  o.weight_decay = 0.01f;
  return o;
}

OptimizerConfig sgd() {
  OptimizerConfig o;
  o.type = OptimizerType::kSGD;
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  return o;
}

OptimizerConfig lion() {
  OptimizerConfig o;
  o.type = OptimizerType::kLion;
  o.beta2 = 0.99f;
  o.weight_decay = 0.1f;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, NarrowStepTest,
    ::testing::Values(Case{"adamw_bf16_master", adam(true), {DType::kBF16, DType::kF32}},
                      Case{"adamw_bf16_master_bf16_states", adam(true), {DType::kBF16, DType::kBF16}},
                      Case{"adam_l2_bf16_master_bf16_states", adam(false), {DType::kBF16, DType::kBF16}},
                      Case{"adamw_fp16_master", adam(true), {DType::kF16, DType::kF32}},
                      Case{"sgd_momentum_bf16_master_bf16_states", sgd(), {DType::kBF16, DType::kBF16}},
                      Case{"lion_bf16_master", lion(), {DType::kBF16, DType::kF32}},
                      Case{"lion_bf16_master_bf16_states", lion(), {DType::kBF16, DType::kBF16}},
                      Case{"lion_fp16_master", lion(), {DType::kF16, DType::kF32}}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The narrowing is the backend's cast, which must round to nearest, ties to
// even (as DeepSpeed's store_16_f32_as_bf16_nearest): 1 + 2^-8 lies halfway
// between bf16 1 and 1 + 2^-7 and goes to 1 (even); 1 + 3 * 2^-8 goes up to
// 1 + 2^-6; anything past the halfway point goes up.
TEST(OptimizerPrecisionTest, NarrowingRoundsToNearestEven) {
  CpuBackend b;
  std::vector<float> v = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -(1.0f + 0x1p-8f)};
  const std::vector<float> want = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -1.0f};
  const Tensor t = Tensor::wrap(v.data(), {static_cast<int64_t>(v.size())}, DType::kF32);
  const Tensor n = cast_to(b, t, DType::kBF16);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(load_as_float(n.data(), DType::kBF16, i), want[i]) << i;
}

TEST(OptimizerPrecisionTest, StagingIsTrackedWorkspace) {
  CpuBackend b;
  // Adam on the CPU steps the 16-bit arrays in one pass: no staging at all.
  const int64_t before = b.memory().at(Tier::kHost, MemCategory::kWorkspace).current;
  auto o = make_optimizer(adam(true), b, {DType::kBF16, DType::kBF16});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(b.memory().at(Tier::kHost, MemCategory::kWorkspace).current - before, 0);
  EXPECT_EQ(narrow_step_staging_bytes({DType::kBF16, DType::kBF16}, 2), 3 * kNarrowStepElems * 4);
  EXPECT_EQ(narrow_step_staging_bytes({DType::kBF16, DType::kF32}, 2), kNarrowStepElems * 4);
  EXPECT_EQ(narrow_step_staging_bytes({}, 2), 0);
  // Lion keeps one state: one staging array for it beside the master's.
  const int64_t lion_before = b.memory().at(Tier::kHost, MemCategory::kWorkspace).current;
  auto l = make_optimizer(lion(), b, {DType::kBF16, DType::kBF16});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(b.memory().at(Tier::kHost, MemCategory::kWorkspace).current - lion_before,
            narrow_step_staging_bytes({DType::kBF16, DType::kBF16}, 1));
  EXPECT_EQ(narrow_step_staging_bytes({DType::kBF16, DType::kBF16}, 1), 2 * kNarrowStepElems * 4);
}

TEST(OptimizerPrecisionTest, RulesNameTheirKeys) {
  auto msg = [](const OptimizerPrecision& p, int stage, DType param, DType grad) {
    const absl::Status s = check_optimizer_precision(p, stage, param, grad);
    return s.ok() ? std::string("ok") : std::string(s.message());
  };
  const OptimizerPrecision bf16{DType::kBF16, DType::kF32};
  EXPECT_EQ(msg(bf16, 1, DType::kBF16, DType::kBF16), "ok");
  EXPECT_EQ(msg({DType::kF16, DType::kF32}, 3, DType::kF16, DType::kF16), "ok");
  EXPECT_NE(msg(bf16, 0, DType::kBF16, DType::kBF16)
                .find("bf16.bf16_master_weights_and_grads: Bf16_master_weights_and_grads is only supported with ZeRO "
                      "Stage 1, 2, or 3"),
            std::string::npos);
  EXPECT_NE(msg(bf16, 2, DType::kF32, DType::kF32).find("needs bf16.enabled true"), std::string::npos);
  EXPECT_NE(msg(bf16, 2, DType::kBF16, DType::kF32).find("data_types.grad_accum_dtype asks for fp32"),
            std::string::npos);
  EXPECT_NE(msg({DType::kF32, DType::kBF16}, 2, DType::kBF16, DType::kBF16)
                .find("bf16.bf16_optimizer_states: bf16_optimizer_states requires bf16_master_weights_and_grads"),
            std::string::npos);
  EXPECT_NE(msg({DType::kF16, DType::kF32}, 0, DType::kF16, DType::kF16).find("fp16.fp16_master_weights_and_grads"),
            std::string::npos);
}

}  // namespace
}  // namespace zero
