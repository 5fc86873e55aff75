// The fused softmax cross-entropy and the optimizer steps on the CPU (our
// SIMD kernels).
//  * cross_entropy: losses vs the double reference; the gradient it writes
//    into the logits vs central differences of the reference loss; ignored
//    rows (target -1) give loss 0 and an all-zero gradient; a row of ~1e4
//    logits stays finite and accurate.
//  * adamw: 3 elements over 2 steps against numbers worked out by hand with
//    the DeepSpeed / PyTorch formula, in AdamW and L2 mode with grad_scale;
//    the fused 16-bit parameter copy equals the rounded master bit for bit;
//    16-bit gradients give the same step as their fp32 values.
//  * sgd: momentum, dampening, nesterov and weight decay over several steps
//    against torch.optim.SGD's update written out in double.
//  * lion: five steps against ref::lion_step (double), with and without
//    weight decay, grad_scale 0.5, fp32 and bf16 gradients, no copy or an
//    fp32/bf16/fp16 copy (the rounded master, bit for bit), at sizes with
//    ragged tails for both vector widths and one large enough to run on
//    several threads; zero gradients on a zero momentum take sign 0 (only the
//    decay acts), a NaN gradient gives a NaN weight (torch.sign).
//
// Tolerances:
//  * losses, per element 1e-5 relative + 1e-5 absolute: a loss is log(sum) +
//    max - x[target] with sum over 37 fp32 exps (a few ulp each); the
//    absolute part covers losses near 0. The ~1e4 row is held to 1e-5
//    relative as well, which needs max - x[target] formed before adding
//    log(sum) (at 1e4 one fp32 ulp is 1e-3).
//  * gradient vs reference::numeric_vjp (central differences in double):
//    1e-4 relative to the max-norm.
//  * optimizer steps, per element 1e-5 relative: the hyper-parameters are
//    fp32 (1 - 0.99f differs from 0.01 by 1e-6 relative) and each step is
//    ~10 fp32 operations; a wrong formula (eps inside the sqrt or before the
//    bias correction, decay after the update, missing bias correction) moves
//    the values by 5e-4 relative or more with the numbers chosen here.
//    Lion's steps are held to the same bound (plus 1e-7 absolute for values
//    near 0): each is ~6 fp32 operations, and a wrong sign or a decay of the
//    wrong form moves a weight by lr * wd * |p| >= 1e-5 or by lr = 0.01.
#include "tests/kernels/kernel_test_util.h"

namespace zero::test {
namespace {

// ------------------------------------------------------------ cross-entropy

constexpr int64_t kRows = 6, kVocab = 37;

class CrossEntropyTest : public KernelTest {
 protected:
  // Rows 2 and 4 are ignored; row 5 holds logits around 1e4.
  void SetUp() override {
    targets_ = {3, 36, -1, 0, -1, 17};
    logits_ = rounded(random_vec(kRows * kVocab, -4.0, 4.0, 501), DType::kF32);
    for (int64_t j = 0; j < kVocab; ++j) logits_[5 * kVocab + j] = 1e4 + 0.25 * (j % 9);
  }
  // Runs the op on a copy; returns the losses, and the logits tensor (now the gradient).
  Vec run(float grad_scale, Tensor* grad) {
    *grad = from_vec(logits_, {kRows, kVocab});
    Tensor losses = empty({kRows}, DType::kF32);
    ops().cross_entropy(*grad, from_ids(targets_), grad_scale, losses);
    return to_vec(losses);
  }

  std::vector<int32_t> targets_;
  Vec logits_;
};

TEST_F(CrossEntropyTest, LossesMatchReference) {
  Tensor grad;
  const Vec losses = run(1.0f, &grad);
  EXPECT_TRUE(near_each(losses, ref::cross_entropy(logits_, targets_, kVocab), 1e-5, 1e-5));
  EXPECT_EQ(losses[2], 0.0);
  EXPECT_EQ(losses[4], 0.0);
}

TEST_F(CrossEntropyTest, GradientMatchesFiniteDifferences) {
  const float grad_scale = 0.25f;  // e.g. 1 / (number of counted rows)
  Tensor grad;
  run(grad_scale, &grad);
  // d(grad_scale * sum_n loss_n) / d logits.
  const Vec dy(kRows, grad_scale);
  const Vec want = ref::numeric_vjp(
      [&](const Vec& x) { return ref::cross_entropy(x, targets_, kVocab); }, logits_, dy);
  const Vec got = to_vec(grad);
  EXPECT_TRUE(near_max_norm(got, want, 1e-4));
  for (int64_t j = 0; j < kVocab; ++j) {
    ASSERT_EQ(got[2 * kVocab + j], 0.0) << "ignored row 2, column " << j;
    ASSERT_EQ(got[4 * kVocab + j], 0.0) << "ignored row 4, column " << j;
  }
  // Each counted row of the gradient sums to 0 (softmax minus one-hot).
  for (int64_t r : {0, 1, 3, 5}) {
    double sum = 0.0;
    for (int64_t j = 0; j < kVocab; ++j) sum += got[r * kVocab + j];
    EXPECT_NEAR(sum, 0.0, 1e-6) << "row " << r;
  }
}

TEST_F(CrossEntropyTest, LargeLogitsStayFinite) {
  Tensor grad;
  const Vec losses = run(1.0f, &grad);
  const Vec want = ref::cross_entropy(logits_, targets_, kVocab);
  ASSERT_TRUE(std::isfinite(losses[5]));
  EXPECT_NEAR(losses[5], want[5], 1e-5 * want[5]);
  for (double g : to_vec(grad)) ASSERT_TRUE(std::isfinite(g));
}

// ------------------------------------------------------------ AdamW

// The step, element by element (DeepSpeed CPU-Adam = torch.optim.AdamW):
//   g = grad * grad_scale;  L2 mode: g += wd * p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps
//   AdamW mode: p -= lr * wd * p               (decoupled, before the update)
//   p -= lr / (1 - b1^t) * m / denom
// with lr = 0.05, b1 = 0.9, b2 = 0.99, eps = 0.01, wd = 0.2, grad_scale = 0.5.
// Raw gradients: step 1 (0.2, -0.1, 0), step 2 (-0.3, 0.4, 0.1); p0 = (0.5, -1, 2).
//
// AdamW, step 1, element 0: g = 0.1, m = 0.01, v = 1e-4, m / (1 - 0.9) = 0.1,
// denom = sqrt(1e-4) / sqrt(1 - 0.99) + 0.01 = 0.11,
// p = 0.5 * (1 - 0.05 * 0.2) - 0.05 * 0.1 / 0.11 = 0.449545455.
// Element 2 has g = 0, so m = v = 0 and only the decay acts: p = 2 * 0.99 = 1.98.
// The other values were worked the same way (in double, 9 significant digits).
struct AdamStep {
  Vec p, m, v;
};
const AdamStep kAdamW[2] = {
    {{0.449545455, -0.948333333, 1.98}, {0.01, -0.005, 0.0}, {1e-4, 2.5e-5, 0.0}},
    {{0.456525024, -0.964980915, 1.93124595},
     {-0.006, 0.0155, 0.005},
     {3.24e-4, 4.2475e-4, 2.5e-5}},
};
// L2 mode: the decay enters the gradient (step 1, element 0: g = 0.1 + 0.2 * 0.5 = 0.2).
const AdamStep kAdamL2[2] = {
    {{0.452380952, -0.951923077, 1.95121951}, {0.02, -0.025, 0.04}, {4e-4, 6.25e-4, 1.6e-3}},
    {{0.432218119, -0.921525647, 1.90232509},
     {0.012047619, -0.0215384615, 0.0800243902},
     {4.31430839e-4, 6.19674556e-4, 3.52214694e-3}},
};
const Vec kRawGrads[2] = {{0.2, -0.1, 0.0}, {-0.3, 0.4, 0.1}};
constexpr double kStepTol = 1e-5;

AdamWHyper adam_hyper(bool adamw_mode, int64_t step) {
  return {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 0.01f, .weight_decay = 0.2f,
          .step = step, .adamw_mode = adamw_mode, .grad_scale = 0.5f};
}

class AdamWTest : public KernelTest, public ::testing::WithParamInterface<bool> {};

TEST_P(AdamWTest, TwoStepsMatchHandComputedValues) {
  const bool adamw_mode = GetParam();
  const AdamStep* want = adamw_mode ? kAdamW : kAdamL2;
  Tensor p = from_vec({0.5, -1.0, 2.0}, {3});
  Tensor m = empty({3}, DType::kF32), v = empty({3}, DType::kF32);
  ops().fill(m, 0.0f), ops().fill(v, 0.0f);
  for (int64_t step = 1; step <= 2; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Tensor grad = from_vec(kRawGrads[step - 1], {3});
    ops().adamw(p, grad, m, v, Tensor(), adam_hyper(adamw_mode, step));
    EXPECT_TRUE(near_each(to_vec(p), want[step - 1].p, kStepTol, 0.0)) << "p";
    EXPECT_TRUE(near_each(to_vec(m), want[step - 1].m, kStepTol, 0.0)) << "m";
    EXPECT_TRUE(near_each(to_vec(v), want[step - 1].v, kStepTol, 0.0)) << "v";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, AdamWTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "AdamW" : "L2"; });

class AdamWDtypeTest : public KernelTest, public ::testing::WithParamInterface<DType> {};

// The fused parameter copy is the rounded master, bit for bit, and a 16-bit
// gradient steps exactly as its fp32 value does.
TEST_P(AdamWDtypeTest, FusedParamCopyAndLowPrecisionGrads) {
  const DType dtype = GetParam();
  constexpr int64_t n = 37;
  const Vec p0 = random_vec(n, -1.0, 1.0, 511);
  const Vec grad = rounded(random_vec(n, -0.1, 0.1, 512), dtype);
  Tensor p_a = from_vec(p0, {n}), p_b = from_vec(p0, {n});
  Tensor m_a = empty({n}, DType::kF32), v_a = empty({n}, DType::kF32);
  Tensor m_b = empty({n}, DType::kF32), v_b = empty({n}, DType::kF32);
  for (Tensor* t : {&m_a, &v_a, &m_b, &v_b}) ops().fill(*t, 0.0f);
  Tensor param_out = empty({n}, dtype);
  Tensor grad_low = from_vec(grad, {n}, dtype), grad_f32 = from_vec(grad, {n});
  for (int64_t step = 1; step <= 3; ++step) {
    ops().adamw(p_a, grad_low, m_a, v_a, param_out, adam_hyper(true, step));
    ops().adamw(p_b, grad_f32, m_b, v_b, Tensor(), adam_hyper(true, step));
    Tensor want = empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) store_from_float(want.data(), dtype, i, p_a.f32()[i]);
    EXPECT_TRUE(same_bits(param_out, want)) << "param_out, step " << step;
    EXPECT_TRUE(same_bits(p_a, p_b)) << "master, step " << step;
    EXPECT_TRUE(same_bits(m_a, m_b) && same_bits(v_a, v_b)) << "moments, step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamWDtypeTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         dtype_param_name);

// ------------------------------------------------------------ SGD

struct SgdCase {
  const char* name;
  float momentum, dampening, weight_decay;
  bool nesterov;
};

void PrintTo(const SgdCase& c, std::ostream* os) { *os << c.name; }

class SgdTest : public KernelTest, public ::testing::WithParamInterface<SgdCase> {};

// torch.optim.SGD.step for one parameter, in double.
void torch_sgd_step(Vec& p, const Vec& grad, Vec& buf, bool first, const SgdHyper& h) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = grad[i] * h.grad_scale;
    if (h.weight_decay != 0.0f) d += double{h.weight_decay} * p[i];
    if (h.momentum != 0.0f) {
      buf[i] = first ? d : double{h.momentum} * buf[i] + (1.0 - double{h.dampening}) * d;
      d = h.nesterov ? d + double{h.momentum} * buf[i] : buf[i];
    }
    p[i] -= double{h.lr} * d;
  }
}

TEST_P(SgdTest, StepsMatchTorchFormula) {
  const SgdCase c = GetParam();
  constexpr int64_t n = 37;
  Vec p = rounded(random_vec(n, -1.0, 1.0, 521), DType::kF32), buf(n, 0.0);
  Tensor p_t = from_vec(p, {n}), buf_t = empty({n}, DType::kF32);
  Tensor param_out = empty({n}, DType::kBF16);
  for (int64_t step = 1; step <= 4; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const Vec grad = rounded(random_vec(n, -1.0, 1.0, 530 + step), DType::kF32);
    const SgdHyper h{.lr = 0.1f, .momentum = c.momentum, .dampening = c.dampening,
                     .weight_decay = c.weight_decay, .nesterov = c.nesterov,
                     .first_step = step == 1, .grad_scale = 0.5f};
    ops().sgd(p_t, from_vec(grad, {n}), buf_t, param_out, h);
    torch_sgd_step(p, grad, buf, step == 1, h);
    EXPECT_TRUE(near_each(to_vec(p_t), p, kStepTol, 1e-7)) << "p";
    if (c.momentum != 0.0f) {
      EXPECT_TRUE(near_each(to_vec(buf_t), buf, kStepTol, 1e-7)) << "buf";
    }
    Tensor want = empty({n}, DType::kBF16);
    for (int64_t i = 0; i < n; ++i) store_from_float(want.data(), DType::kBF16, i, p_t.f32()[i]);
    EXPECT_TRUE(same_bits(param_out, want)) << "param_out";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, SgdTest,
                         ::testing::Values(SgdCase{"plain_decay", 0.0f, 0.0f, 0.01f, false},
                                           SgdCase{"momentum", 0.9f, 0.0f, 0.0f, false},
                                           SgdCase{"dampening_decay", 0.9f, 0.3f, 0.01f, false},
                                           SgdCase{"nesterov_decay", 0.9f, 0.0f, 0.01f, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ------------------------------------------------------------ Lion

struct LionCase {
  const char* name;
  int64_t n;  // ragged against both vector widths (16 and 8)
  DType grad_dtype;
  bool copy;  // a fused parameter copy, in param_dtype
  DType param_dtype;
  float weight_decay;
};

void PrintTo(const LionCase& c, std::ostream* os) { *os << c.name; }

class LionTest : public KernelTest, public ::testing::WithParamInterface<LionCase> {};

TEST_P(LionTest, StepsMatchReference) {
  const LionCase c = GetParam();
  const int64_t n = c.n;
  Vec p = rounded(random_vec(n, -1.0, 1.0, 541), DType::kF32), m(n, 0.0);
  Tensor p_t = from_vec(p, {n}), m_t = empty({n}, DType::kF32);
  ops().fill(m_t, 0.0f);
  Tensor param_out = c.copy ? empty({n}, c.param_dtype) : Tensor();
  const LionHyper h{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = c.weight_decay, .grad_scale = 0.5f};
  const ref::LionParams r{h.lr, h.beta1, h.beta2, h.weight_decay, h.grad_scale};
  for (int64_t step = 1; step <= 5; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    Vec grad = rounded(random_vec(n, -1.0, 1.0, 550 + step), c.grad_dtype);
    // With m = 0, a zero gradient gives c = 0: sign 0, only the decay acts.
    if (step == 1)
      for (int64_t i = 0; i < n; i += 7) grad[i] = 0.0;
    ops().lion(p_t, from_vec(grad, {n}, c.grad_dtype), m_t, param_out, h);
    ref::lion_step(p, m, grad, r);
    ASSERT_TRUE(near_each(to_vec(p_t), p, kStepTol, 1e-7)) << "p";
    ASSERT_TRUE(near_each(to_vec(m_t), m, kStepTol, 1e-7)) << "m";
    if (c.copy) {
      Tensor want = empty({n}, c.param_dtype);
      for (int64_t i = 0; i < n; ++i) store_from_float(want.data(), c.param_dtype, i, p_t.f32()[i]);
      EXPECT_TRUE(same_bits(param_out, want)) << "param_out";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LionTest,
    ::testing::Values(LionCase{"fp32_grads_no_copy_decay", 37, DType::kF32, false, DType::kF32, 0.1f},
                      LionCase{"fp32_grads_fp32_copy_no_decay", 77, DType::kF32, true, DType::kF32, 0.0f},
                      LionCase{"bf16_grads_bf16_copy_decay", 1003, DType::kBF16, true, DType::kBF16, 0.1f},
                      LionCase{"fp32_grads_fp16_copy_decay", 45, DType::kF32, true, DType::kF16, 0.1f},
                      LionCase{"bf16_grads_bf16_copy_threads", 40005, DType::kBF16, true, DType::kBF16, 0.1f}),
    [](const auto& info) { return std::string(info.param.name); });

class LionSignTest : public KernelTest {};

// torch.sign's edge cases through the update: -0 gives sign 0 (the weight
// stays put without decay), a NaN gradient gives a NaN weight, in the vector
// body (element 3) and in the tail (element 35 of 37).
TEST_F(LionSignTest, ZeroKeepsAndNanPropagates) {
  constexpr int64_t n = 37;
  const Vec p0 = rounded(random_vec(n, -1.0, 1.0, 561), DType::kF32);
  Vec grad = random_vec(n, -1.0, 1.0, 562);
  grad[5] = -0.0;
  grad[3] = grad[35] = std::nan("");
  Tensor p = from_vec(p0, {n}), m = empty({n}, DType::kF32);
  ops().fill(m, 0.0f);
  ops().lion(p, from_vec(grad, {n}), m, Tensor(), LionHyper{.lr = 0.01f});
  const Vec got = to_vec(p);
  for (int64_t i = 0; i < n; ++i) {
    if (i == 3 || i == 35) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else if (i == 5) {
      EXPECT_EQ(got[i], p0[i]);
    } else {
      // m = 0: c = 0.1 g, so the weight moves by lr against g's sign (rounded once).
      EXPECT_EQ(got[i], static_cast<float>(p0[i] - (grad[i] > 0 ? 1.0 : -1.0) * double{0.01f})) << i;
    }
  }
}

}  // namespace
}  // namespace zero::test
