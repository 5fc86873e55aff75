// The SIMD kernel tables themselves (cpu::simd_kernels_for("avx512"/"avx2")),
// called directly so both ISAs are tested on a machine that has both; a table
// the CPU cannot run is skipped.
//  * Casts agree bit for bit with core/dtype.h's scalar conversions
//    (the reference the kernels promise to match) over round-to-even ties,
//    denormals, overflow, +/-inf, NaNs (which must stay NaN) and random bit
//    patterns; widening casts for all 65536 16-bit patterns.
//  * The one-lane tail computes what the vector body computes: the first 37
//    elements of a run over 64 equal a run over 37, bit for bit; and a
//    threaded run equals the same elements processed in small pieces.
//  * The two tables give identical bits for every elementwise op, the casts
//    and the optimizer steps (same IEEE operations, same FMAs, no reductions).
//  * The reducing kernels (softmax, cross-entropy, sum of squares), whose
//    summation order depends on the vector width, are checked per table
//    against the double reference at the tolerances of the op tests (1e-5
//    relative per probability / loss, 1e-4 of the max-norm for gradients,
//    1e-12 relative for the double-accumulated sum of squares).
#include <limits>
#include <vector>

#include "kernels/cpu/simd_kernels.h"
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

using cpu::SimdKernels;

constexpr const char* kIsas[] = {"avx512", "avx2"};

std::vector<float> floats_from_bits(const std::vector<uint32_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = bits_float(bits[i]);
  return f;
}

std::vector<float> random_floats(size_t n, double lo, double hi, uint64_t seed) {
  const Vec v = random_vec(n, lo, hi, seed);
  return std::vector<float>(v.begin(), v.end());
}

// fp32 bit patterns around every rounding decision of fp32 -> bf16.
const std::vector<uint32_t> kBf16Specials = {
    0x00000000, 0x80000000, 0x3f800000,
    0x3f808000,  // tie, even neighbour below: rounds down to 0x3f80
    0x3f818000,  // tie, odd neighbour below: rounds up to 0x3f82
    0x3f807fff, 0x3f808001, 0xbf808000, 0xbf818000,
    0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x807fffff, 0x00800000,  // denormals
    0x7f7f7fff, 0x7f7f8000, 0x7f7fffff,  // near the top: the last two round to inf
    0x7f800000, 0xff800000,              // +/-inf
    0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff, 0xffffffff, 0x7f810000,  // NaNs
};

// fp32 bit patterns around every rounding decision of fp32 -> fp16.
const std::vector<uint32_t> kFp16Specials = {
    0x00000000, 0x80000000, 0x3f800000,
    0x3f801000,  // 1 + 2^-11: tie, rounds to 1.0
    0x3f803000,  // 1 + 3 * 2^-11: tie, rounds up
    0x3f800fff, 0x3f801001,
    0x477fe000,  // 65504, the largest fp16
    0x477fefff, 0x477ff000, 0xc77ff000, 0x47c35000,  // just below / at the tie to inf; 1e5
    0x38800000,  // 2^-14, smallest normal fp16
    0x33800000, 0x33000000, 0x33000001, 0x33400000, 0x33c00000,  // fp16 denormals and ties
    0x387fc000, 0x00000001, 0x80000001, 0x322bcc77,  // denormal fp32, 1e-8: underflow to 0
    0x7f800000, 0xff800000,
    0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0x7fffffff, 0x7f802000,
};

// Special values, then random bit patterns (every class: NaN, inf, denormal,
// normal), then the specials again so they land in the vector tail too.
std::vector<uint32_t> cast_inputs(const std::vector<uint32_t>& specials) {
  std::vector<uint32_t> bits = specials;
  std::mt19937_64 gen(601);
  for (int i = 0; i < 10001; ++i) bits.push_back(static_cast<uint32_t>(gen()));
  bits.insert(bits.end(), specials.begin(), specials.end());
  return bits;
}

class SimdIsaTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    k_ = cpu::simd_kernels_for(GetParam());
    if (k_ == nullptr) GTEST_SKIP() << "this CPU cannot run the " << GetParam() << " kernels";
  }
  const SimdKernels* k_ = nullptr;
};

// ------------------------------------------------------------------ casts

TEST_P(SimdIsaTest, CastFp32ToBf16MatchesScalarHelper) {
  const std::vector<float> src = floats_from_bits(cast_inputs(kBf16Specials));
  std::vector<uint16_t> got(src.size()), want(src.size());
  for (size_t i = 0; i < src.size(); ++i) want[i] = float_to_bf16(src[i]);
  k_->cast(src.data(), DType::kF32, got.data(), DType::kBF16, static_cast<int64_t>(src.size()));
  EXPECT_TRUE(same_bits(got.data(), want.data(), src.size(), 2));
  for (size_t i = 0; i < src.size(); ++i)
    if (std::isnan(src[i])) {
      ASSERT_TRUE(std::isnan(bf16_to_float(got[i]))) << i;
    }
  // Each special value alone: the one-lane path.
  for (uint32_t b : kBf16Specials) {
    const float f = bits_float(b);
    uint16_t one = 0;
    k_->cast(&f, DType::kF32, &one, DType::kBF16, 1);
    EXPECT_EQ(one, float_to_bf16(f)) << std::hex << "input 0x" << b;
  }
}

TEST_P(SimdIsaTest, CastFp32ToFp16MatchesScalarHelper) {
  const std::vector<float> src = floats_from_bits(cast_inputs(kFp16Specials));
  std::vector<uint16_t> got(src.size()), want(src.size());
  for (size_t i = 0; i < src.size(); ++i) want[i] = float_to_fp16(src[i]);
  k_->cast(src.data(), DType::kF32, got.data(), DType::kF16, static_cast<int64_t>(src.size()));
  EXPECT_TRUE(same_bits(got.data(), want.data(), src.size(), 2));
  for (size_t i = 0; i < src.size(); ++i)
    if (std::isnan(src[i])) {
      ASSERT_TRUE(std::isnan(fp16_to_float(got[i]))) << i;
    }
  for (uint32_t b : kFp16Specials) {
    const float f = bits_float(b);
    uint16_t one = 0;
    k_->cast(&f, DType::kF32, &one, DType::kF16, 1);
    EXPECT_EQ(one, float_to_fp16(f)) << std::hex << "input 0x" << b;
  }
}

// Widening is exact, and 16 -> 16 goes through fp32 with one rounding.
TEST_P(SimdIsaTest, CastsFrom16BitMatchForAllPatterns) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const int64_t n = static_cast<int64_t>(all.size());
  std::vector<float> f(all.size()), want_f(all.size());
  std::vector<uint16_t> h(all.size()), want_h(all.size());

  k_->cast(all.data(), DType::kBF16, f.data(), DType::kF32, n);
  for (size_t i = 0; i < all.size(); ++i) want_f[i] = bf16_to_float(all[i]);
  EXPECT_TRUE(same_bits(f.data(), want_f.data(), all.size(), 4)) << "bf16 -> fp32";

  k_->cast(all.data(), DType::kF16, f.data(), DType::kF32, n);
  for (size_t i = 0; i < all.size(); ++i) want_f[i] = fp16_to_float(all[i]);
  EXPECT_TRUE(same_bits(f.data(), want_f.data(), all.size(), 4)) << "fp16 -> fp32";

  k_->cast(all.data(), DType::kF16, h.data(), DType::kBF16, n);
  for (size_t i = 0; i < all.size(); ++i) want_h[i] = float_to_bf16(fp16_to_float(all[i]));
  EXPECT_TRUE(same_bits(h.data(), want_h.data(), all.size(), 2)) << "fp16 -> bf16";

  k_->cast(all.data(), DType::kBF16, h.data(), DType::kF16, n);
  for (size_t i = 0; i < all.size(); ++i) want_h[i] = float_to_fp16(bf16_to_float(all[i]));
  EXPECT_TRUE(same_bits(h.data(), want_h.data(), all.size(), 2)) << "bf16 -> fp16";
}

// ------------------------------------------------------- tail == vector body

// Optimizer state for n elements, each buffer filled from its own seed.
struct OptimState {
  std::vector<float> master, m, v;
  std::vector<uint16_t> grad16, param16;
  explicit OptimState(int64_t n)
      : master(random_floats(n, -1.0, 1.0, 611)),
        m(random_floats(n, -0.01, 0.01, 612)),
        v(random_floats(n, 0.0, 1e-4, 613)),
        grad16(n),
        param16(n) {
    const std::vector<float> g = random_floats(n, -0.1, 0.1, 614);
    for (int64_t i = 0; i < n; ++i) grad16[i] = float_to_bf16(g[i]);
  }
};

const AdamWHyper kAdamHyper{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .weight_decay = 0.1f, .step = 7, .grad_scale = 0.7f};
const SgdHyper kSgdHyper{.lr = 0.01f, .momentum = 0.9f, .dampening = 0.1f, .weight_decay = 1e-3f,
                         .nesterov = true, .first_step = false, .grad_scale = 0.7f};

void run_adamw(const SimdKernels& k, OptimState& s, int64_t n) {
  k.adamw(s.master.data(), s.grad16.data(), DType::kBF16, s.m.data(), s.v.data(), s.param16.data(),
          DType::kBF16, n, kAdamHyper);
}
void run_sgd(const SimdKernels& k, OptimState& s, int64_t n) {
  k.sgd(s.master.data(), s.grad16.data(), DType::kBF16, s.m.data(), s.param16.data(), DType::kBF16,
        n, kSgdHyper);
}
const LionHyper kLionHyper{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f, .grad_scale = 0.7f};
void run_lion(const SimdKernels& k, OptimState& s, int64_t n) {
  k.lion(s.master.data(), s.grad16.data(), DType::kBF16, s.m.data(), s.param16.data(), DType::kBF16, n,
         kLionHyper);
}
// The name of one of the steps above, for failure messages.
const char* step_name(void (*step)(const SimdKernels&, OptimState&, int64_t)) {
  return step == &run_adamw ? "adamw" : step == &run_sgd ? "sgd" : "lion";
}

// The first `n` elements of every buffer of a and b are identical.
::testing::AssertionResult same_prefix(const OptimState& a, const OptimState& b, size_t n) {
  for (auto r : {same_bits(a.master.data(), b.master.data(), n, 4),
                 same_bits(a.m.data(), b.m.data(), n, 4), same_bits(a.v.data(), b.v.data(), n, 4),
                 same_bits(a.param16.data(), b.param16.data(), n, 2)})
    if (!r) return r;
  return ::testing::AssertionSuccess();
}

TEST_P(SimdIsaTest, OptimizerTailMatchesVectorBody) {
  for (auto* step : {&run_adamw, &run_sgd, &run_lion}) {
    OptimState full(64), part(64);
    for (int i = 0; i < 3; ++i) step(*k_, full, 64), step(*k_, part, 37);
    EXPECT_TRUE(same_prefix(full, part, 37)) << step_name(step);
  }
}

TEST_P(SimdIsaTest, ElementwiseTailMatchesVectorBody) {
  const std::vector<float> a = random_floats(64, -3.0, 3.0, 621);
  const std::vector<float> b = random_floats(64, -3.0, 3.0, 622);
  for (int64_t n : {int64_t{64}, int64_t{37}}) {
    SCOPED_TRACE(n);
    std::vector<float> sum(n);
    std::vector<uint16_t> acc16(n, float_to_bf16(0.37f)), scaled16(n), cast16(n);
    k_->add(a.data(), b.data(), sum.data(), n);
    k_->accumulate(acc16.data(), DType::kBF16, a.data(), n);
    k_->cast(a.data(), DType::kF32, scaled16.data(), DType::kF16, n);
    k_->scale(scaled16.data(), DType::kF16, -1.7f, n);
    k_->cast(b.data(), DType::kF32, cast16.data(), DType::kBF16, n);
    // Compare every element with the one-lane result for the same element.
    for (int64_t i = 0; i < n; ++i) {
      float one_sum;
      uint16_t one_acc = float_to_bf16(0.37f), one_scaled, one_cast;
      k_->add(&a[i], &b[i], &one_sum, 1);
      k_->accumulate(&one_acc, DType::kBF16, &a[i], 1);
      k_->cast(&a[i], DType::kF32, &one_scaled, DType::kF16, 1);
      k_->scale(&one_scaled, DType::kF16, -1.7f, 1);
      k_->cast(&b[i], DType::kF32, &one_cast, DType::kBF16, 1);
      ASSERT_EQ(float_bits(sum[i]), float_bits(one_sum)) << "add " << i;
      ASSERT_EQ(acc16[i], one_acc) << "accumulate " << i;
      ASSERT_EQ(scaled16[i], one_scaled) << "scale " << i;
      ASSERT_EQ(cast16[i], one_cast) << "cast " << i;
    }
  }
}

// Above 2^15 elements the work is split across OpenMP threads; the result must
// not depend on where the split falls.
TEST_P(SimdIsaTest, ThreadedRunMatchesPieces) {
  constexpr int64_t kN = 100003, kPiece = 1001;  // every piece ends in a tail (16 and 8 lanes)
  OptimState whole(kN), pieces(kN);
  run_adamw(*k_, whole, kN);
  for (int64_t begin = 0; begin < kN; begin += kPiece) {
    const int64_t len = std::min(kPiece, kN - begin);
    k_->adamw(pieces.master.data() + begin, pieces.grad16.data() + begin, DType::kBF16,
              pieces.m.data() + begin, pieces.v.data() + begin, pieces.param16.data() + begin,
              DType::kBF16, len, kAdamHyper);
  }
  EXPECT_TRUE(same_prefix(whole, pieces, kN)) << "adamw";
  OptimState lion_whole(kN), lion_pieces(kN);
  run_lion(*k_, lion_whole, kN);
  for (int64_t begin = 0; begin < kN; begin += kPiece) {
    const int64_t len = std::min(kPiece, kN - begin);
    k_->lion(lion_pieces.master.data() + begin, lion_pieces.grad16.data() + begin, DType::kBF16,
             lion_pieces.m.data() + begin, lion_pieces.param16.data() + begin, DType::kBF16, len, kLionHyper);
  }
  EXPECT_TRUE(same_prefix(lion_whole, lion_pieces, kN)) << "lion";
}

// A fill of 4 MiB or more streams its stores: every element is written,
// from an unaligned start through the one-lane head, the vectors and the
// tail, in every float dtype, and nothing outside the range.
TEST_P(SimdIsaTest, LargeFillWritesEveryElementAndNothingElse) {
  constexpr int64_t kN = (int64_t{4} << 20) / 2 + 37;  // >= 4 MiB in every dtype
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t elem = dtype_size(t);
    std::vector<uint8_t> buf((kN + 2) * elem + 64, 0xAB);
    void* x = buf.data() + 3 * elem;  // not vector-aligned
    k_->fill(x, t, 1.5f, kN);
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(load_as_float(x, t, static_cast<size_t>(i)), 1.5f) << i;
    for (size_t b = 0; b < 3 * elem; ++b) ASSERT_EQ(buf[b], 0xAB) << "before, byte " << b;
    for (size_t b = (kN + 3) * elem; b < buf.size(); ++b) ASSERT_EQ(buf[b], 0xAB) << "after, byte " << b;
  }
}

// Adam over 16-bit arrays (bf16 master with bf16 or fp32 moments) is the fp32
// step over their widened values, rounded to nearest even, bit for bit: in
// the vector body, the one-lane tail (37) and a threaded run (100003).
TEST_P(SimdIsaTest, NarrowAdamIsTheWidenedStepRounded) {
  AdamWHyper h = kAdamHyper;
  h.lr = 0.05f;  // steps of ~5%: every bf16 weight moves
  for (int64_t n : {int64_t{64}, int64_t{37}, int64_t{100003}}) {
    for (DType states : {DType::kBF16, DType::kF32}) {
      SCOPED_TRACE(testing::Message() << n << " elements, " << dtype_name(states) << " states");
      OptimState wide(n);
      std::vector<uint16_t> master16(n), m16(n), v16(n), copy16(n);
      std::vector<float> m32(n), v32(n);
      for (int64_t i = 0; i < n; ++i) {
        master16[i] = float_to_bf16(wide.master[i]), wide.master[i] = bf16_to_float(master16[i]);
        if (states == DType::kBF16) {
          m16[i] = float_to_bf16(wide.m[i]), wide.m[i] = bf16_to_float(m16[i]);
          v16[i] = float_to_bf16(wide.v[i]), wide.v[i] = bf16_to_float(v16[i]);
        }
        m32[i] = wide.m[i], v32[i] = wide.v[i];
      }
      void* m = states == DType::kBF16 ? static_cast<void*>(m16.data()) : m32.data();
      void* v = states == DType::kBF16 ? static_cast<void*>(v16.data()) : v32.data();
      k_->adamw(wide.master.data(), wide.grad16.data(), DType::kBF16, wide.m.data(), wide.v.data(), nullptr,
                DType::kF32, n, h);
      k_->adamw_narrow(master16.data(), DType::kBF16, m, v, states, wide.grad16.data(), copy16.data(), n, h);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(master16[i], float_to_bf16(wide.master[i])) << "master " << i;
        ASSERT_EQ(copy16[i], master16[i]) << "parameter copy " << i;
        if (states == DType::kBF16) {
          ASSERT_EQ(m16[i], float_to_bf16(wide.m[i])) << "exp_avg " << i;
          ASSERT_EQ(v16[i], float_to_bf16(wide.v[i])) << "exp_avg_sq " << i;
        } else {
          ASSERT_EQ(float_bits(m32[i]), float_bits(wide.m[i])) << "exp_avg " << i;
          ASSERT_EQ(float_bits(v32[i]), float_bits(wide.v[i])) << "exp_avg_sq " << i;
        }
      }
      const OptimState before(n);
      int64_t moved = 0;
      for (int64_t i = 0; i < n; ++i) moved += master16[i] != float_to_bf16(before.master[i]);
      EXPECT_GT(moved, n / 2) << "the step moved " << moved << " of " << n << " bf16 weights";
    }
  }
}

// --------------------------------------------- reductions, per table, vs double

TEST_P(SimdIsaTest, SoftmaxAndCrossEntropyMatchReference) {
  constexpr int64_t kBH = 2, kT = 37, kRows = 4, kVocab = 37;
  const std::vector<float> scores = random_floats(kBH * kT * kT, -4.0, 4.0, 631);
  std::vector<float> probs(scores.size());
  k_->causal_softmax_forward(scores.data(), probs.data(), kBH, kT);
  const Vec want_p = ref::causal_softmax(Vec(scores.begin(), scores.end()), kBH, kT);
  EXPECT_TRUE(near_each(Vec(probs.begin(), probs.end()), want_p, 1e-5, 0.0)) << "softmax";

  const std::vector<float> dprobs = random_floats(scores.size(), -1.0, 1.0, 632);
  std::vector<float> dscores(scores.size());
  k_->causal_softmax_backward(probs.data(), dprobs.data(), dscores.data(), kBH, kT);
  const Vec want_ds = ref::numeric_vjp(
      [&](const Vec& x) { return ref::causal_softmax(x, kBH, kT); },
      Vec(scores.begin(), scores.end()), Vec(dprobs.begin(), dprobs.end()));
  EXPECT_TRUE(near_max_norm(Vec(dscores.begin(), dscores.end()), want_ds, 1e-4)) << "softmax grad";

  std::vector<float> logits = random_floats(kRows * kVocab, -4.0, 4.0, 633);
  const Vec logits_d(logits.begin(), logits.end());
  const std::vector<int32_t> targets = {5, -1, 36, 0};
  std::vector<float> losses(kRows);
  k_->cross_entropy(logits.data(), targets.data(), kRows, kVocab, 1.0f, losses.data());
  EXPECT_TRUE(near_each(Vec(losses.begin(), losses.end()),
                        ref::cross_entropy(logits_d, targets, kVocab), 1e-5, 1e-5))
      << "losses";
  const Vec want_g = ref::numeric_vjp(
      [&](const Vec& x) { return ref::cross_entropy(x, targets, kVocab); }, logits_d,
      Vec(kRows, 1.0));
  EXPECT_TRUE(near_max_norm(Vec(logits.begin(), logits.end()), want_g, 1e-4)) << "logit grad";
}

TEST_P(SimdIsaTest, SumSquaresAndCountNonfinite) {
  constexpr int64_t kN = 300'007;
  std::vector<float> x = random_floats(kN, -2.0, 2.0, 641);
  for (int64_t i = 0; i < kN; i += 3) x[i] = 1e-3f;
  Vec squares(kN);
  for (int64_t i = 0; i < kN; ++i) squares[i] = static_cast<double>(x[i]) * x[i];
  const double want = compensated_sum(squares);
  EXPECT_NEAR(k_->sum_squares(x.data(), DType::kF32, kN), want, 1e-12 * want);

  EXPECT_EQ(k_->count_nonfinite(x.data(), DType::kF32, kN), 0);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i : {int64_t{0}, int64_t{17}, kN / 2, kN - 1}) x[i] = inf;
  x[kN - 2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(k_->count_nonfinite(x.data(), DType::kF32, kN), 5);
}

INSTANTIATE_TEST_SUITE_P(Isas, SimdIsaTest, ::testing::ValuesIn(kIsas),
                         [](const auto& info) { return std::string(info.param); });

// ------------------------------------------------- avx512 and avx2 agree

class CrossIsaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a512_ = cpu::simd_kernels_for("avx512");
    a2_ = cpu::simd_kernels_for("avx2");
    if (a512_ == nullptr || a2_ == nullptr) {
      GTEST_SKIP() << "needs a CPU with both AVX-512 and AVX2";
    }
  }
  const SimdKernels* a512_ = nullptr;
  const SimdKernels* a2_ = nullptr;
};

TEST_F(CrossIsaTest, ElementwiseOpsAndCastsAreIdentical) {
  constexpr int64_t kN = 100003;  // threaded, odd
  const std::vector<float> a = random_floats(kN, -3.0, 3.0, 651);
  const std::vector<float> b = random_floats(kN, -3.0, 3.0, 652);
  {
    std::vector<float> out512(kN), out2(kN);
    a512_->add(a.data(), b.data(), out512.data(), kN);
    a2_->add(a.data(), b.data(), out2.data(), kN);
    EXPECT_TRUE(same_bits(out512.data(), out2.data(), kN, 4)) << "add";
  }
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t bytes = dtype_size(t);
    std::vector<unsigned char> x512(kN * bytes), x2(kN * bytes);
    a512_->cast(a.data(), DType::kF32, x512.data(), t, kN);
    a2_->cast(a.data(), DType::kF32, x2.data(), t, kN);
    EXPECT_TRUE(same_bits(x512.data(), x2.data(), kN, bytes)) << "cast from fp32";
    a512_->accumulate(x512.data(), t, b.data(), kN);
    a2_->accumulate(x2.data(), t, b.data(), kN);
    EXPECT_TRUE(same_bits(x512.data(), x2.data(), kN, bytes)) << "accumulate";
    a512_->scale(x512.data(), t, 0.3f, kN);
    a2_->scale(x2.data(), t, 0.3f, kN);
    EXPECT_TRUE(same_bits(x512.data(), x2.data(), kN, bytes)) << "scale";
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<unsigned char> y512(kN * dtype_size(d)), y2(kN * dtype_size(d));
      a512_->cast(x512.data(), t, y512.data(), d, kN);
      a2_->cast(x512.data(), t, y2.data(), d, kN);
      EXPECT_TRUE(same_bits(y512.data(), y2.data(), kN, dtype_size(d)))
          << "cast to " << dtype_name(d);
    }
    a512_->fill(x512.data(), t, -0.1f, kN);
    a2_->fill(x2.data(), t, -0.1f, kN);
    EXPECT_TRUE(same_bits(x512.data(), x2.data(), kN, bytes)) << "fill";
  }
}

TEST_F(CrossIsaTest, GradientScattersAreIdentical) {
  constexpr int64_t kRows = 1201, kCols = 37, kVocab = 13, kBatch = 3, kSeq = kRows / kBatch;
  const std::vector<float> dy = random_floats(kRows * kCols, -1.0, 1.0, 661);
  std::vector<int32_t> ids(kRows);
  for (int64_t i = 0; i < kRows; ++i) ids[i] = static_cast<int32_t>((i * 7) % kVocab);
  const std::vector<float> table = random_floats(kVocab * kCols, -1.0, 1.0, 662);
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return same_bits(x.data(), y.data(), x.size(), 4);
  };

  std::vector<float> db512(kCols, 0.5f), db2(kCols, 0.5f);
  a512_->bias_backward(dy.data(), kRows, kCols, db512.data(), DType::kF32);
  a2_->bias_backward(dy.data(), kRows, kCols, db2.data(), DType::kF32);
  EXPECT_TRUE(same(db512, db2)) << "bias_backward";

  std::vector<float> e512(kRows * kCols), e2(kRows * kCols);
  a512_->embedding_forward(ids.data(), kRows, table.data(), DType::kF32, kCols, e512.data(), 0, -1);
  a2_->embedding_forward(ids.data(), kRows, table.data(), DType::kF32, kCols, e2.data(), 0, -1);
  EXPECT_TRUE(same(e512, e2)) << "embedding_forward";
  // A vocabulary slice of rows [3, vocab - 2): the other ids are skipped.
  a512_->embedding_forward(ids.data(), kRows, table.data(), DType::kF32, kCols, e512.data(), 3, kVocab - 5);
  a2_->embedding_forward(ids.data(), kRows, table.data(), DType::kF32, kCols, e2.data(), 3, kVocab - 5);
  EXPECT_TRUE(same(e512, e2)) << "embedding_forward of a slice";

  std::vector<float> dt512(table), dt2(table);
  a512_->embedding_backward(ids.data(), kRows, dy.data(), kCols, dt512.data(), DType::kF32, 0, -1);
  a2_->embedding_backward(ids.data(), kRows, dy.data(), kCols, dt2.data(), DType::kF32, 0, -1);
  EXPECT_TRUE(same(dt512, dt2)) << "embedding_backward";
  a512_->embedding_backward(ids.data(), kRows, dy.data(), kCols, dt512.data(), DType::kF32, 3, kVocab - 5);
  a2_->embedding_backward(ids.data(), kRows, dy.data(), kCols, dt2.data(), DType::kF32, 3, kVocab - 5);
  EXPECT_TRUE(same(dt512, dt2)) << "embedding_backward of a slice";

  std::vector<float> x512(dy.begin(), dy.begin() + kBatch * kSeq * kCols), x2(x512);
  std::vector<float> pos(kSeq * kCols);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = dy[dy.size() - 1 - i];
  a512_->add_positional(x512.data(), kBatch, kSeq, kCols, pos.data(), DType::kF32);
  a2_->add_positional(x2.data(), kBatch, kSeq, kCols, pos.data(), DType::kF32);
  EXPECT_TRUE(same(x512, x2)) << "add_positional";

  std::vector<float> dp512(pos), dp2(pos);
  a512_->positional_backward(dy.data(), kBatch, kSeq, kCols, dp512.data(), DType::kF32);
  a2_->positional_backward(dy.data(), kBatch, kSeq, kCols, dp2.data(), DType::kF32);
  EXPECT_TRUE(same(dp512, dp2)) << "positional_backward";
}

TEST_F(CrossIsaTest, OptimizerStepsAreIdentical) {
  constexpr int64_t kN = 100003;
  for (auto* step : {&run_adamw, &run_sgd, &run_lion}) {
    OptimState s512(kN), s2(kN);
    for (int i = 0; i < 3; ++i) step(*a512_, s512, kN), step(*a2_, s2, kN);
    EXPECT_TRUE(same_prefix(s512, s2, kN)) << step_name(step);
  }
}

}  // namespace
}  // namespace zero::test
