// Automatic backward (graph/tape.h, graph/functional.h), as a user meets it:
//  * every op's recorded rule (graph/functional.h: linear, add, gelu, the
//    norms (Gemma's (1 + w) too), swiglu, geglu, scale, softcap, dropout, matmul,
//    causal softmax, transpose, RoPE, the qkv
//    split, the embeddings and the positions) gives the gradients central
//    differences of its forward give, for the input and every parameter
//    (fp32 forward, the loss sum(r * y) summed in double, h = 1e-2);
//  * a module written with forward only, from recorded ops and from child
//    modules, computes bit for bit what the same block with a hand-written
//    backward computes: output, dx and every parameter gradient;
//  * such a model trains through the engine at ZeRO-3 with activation
//    checkpointing, its losses bit for bit the hand-written twin's;
//  * a forward that feeds a kernel called directly (no backward rule) into a
//    recorded op, or returns its result, is an error at backward naming the
//    module and the op, not a crash or a silent zero gradient;
//  * a parameter used in forward whose use backward never reaches (its op's
//    output, or a child module's, gets no gradient) is warned about on
//    stderr once, by name; a frozen one is not.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/context.h"
#include "graph/functional.h"
#include "graph/init.h"
#include "graph/layers.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/graph/op_cases.h"
#include "tests/testing/parameters.h"

namespace zero {
namespace {

using namespace autograd_cases;  // NOLINT: the shared op cases (tests/graph/op_cases.h)

class OpRuleTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpRuleTest, GradientsMatchCentralDifferences) {
  const OpCase& op = GetParam();
  CpuBackend backend;
  FnModule m("", op.body);
  op.params(m);
  testing::materialise_random(m, backend, 11);
  Context ctx(backend, DType::kF32);
  ctx.set_dropout_key(42, 7);
  std::vector<float> xv = random_values(static_cast<size_t>(shape_numel(op.input)), 3);
  const Tensor x = upload(backend, xv, op.input);
  const Tensor y = ctx.forward(m, x);
  const std::vector<float> r = random_values(static_cast<size_t>(y.numel()), 5);
  const Tensor dx = ctx.backward(m, upload(backend, r, y.shape()));
  ASSERT_TRUE(ctx.take_status().ok());
  ASSERT_EQ(ctx.live_frames(), 0u);
  ASSERT_TRUE(dx.defined()) << op.name;
  std::vector<std::vector<float>> grads;
  for (Parameter* p : m.parameters()) grads.push_back(download_fp32(backend, p->grad));
  testing::expect_central_differences(ctx, m, backend, xv, op.input, r, download_fp32(backend, dx), grads, op.name);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpRuleTest, ::testing::ValuesIn(op_cases()),
                         [](const auto& info) { return info.param.name; });

// A residual MLP block: x + fc2(gelu(fc1(norm(x)))), three ways: children
// with hand-written backwards under a hand-written backward (today's way),
// the same children under a forward-only parent, and recorded ops on
// parameters of its own. Same names, so the same initial values.
constexpr int64_t kWidth = 8, kHidden = 16;

class HandBlock : public Module {
 public:
  explicit HandBlock(std::string name) : Module(std::move(name)) {
    ln_ = add_child<LayerNorm>("ln", kWidth, 1e-5f);
    fc1_ = add_child<Linear>("fc1", kWidth, kHidden, true, 0.3f);
    act_ = add_child<Gelu>("act");
    fc2_ = add_child<Linear>("fc2", kHidden, kWidth, true, 0.3f);
  }
  Tensor forward(Context& ctx, const Tensor& x) override {
    Tensor h = ctx.forward(*fc2_, ctx.forward(*act_, ctx.forward(*fc1_, ctx.forward(*ln_, x))));
    Tensor y = ctx.activation(x.shape());
    ctx.ops().add(x, h, y);
    return y;
  }
  Tensor backward(Context& ctx, const Tensor& dy) override {
    Tensor dx = ctx.backward(*ln_, ctx.backward(*fc1_, ctx.backward(*act_, ctx.backward(*fc2_, dy))));
    ctx.ops().add(dx, dy, dx);
    return dx;
  }

 protected:
  Module *ln_, *fc1_, *act_, *fc2_;
};

// The same children; forward only.
class ChildrenBlock : public HandBlock {
 public:
  using HandBlock::HandBlock;
  Tensor forward(Context& ctx, const Tensor& x) override {
    return fn::add(ctx, x, ctx.forward(*fc2_, ctx.forward(*act_, ctx.forward(*fc1_, ctx.forward(*ln_, x)))));
  }
  Tensor backward(Context& ctx, const Tensor& dy) override { return Module::backward(ctx, dy); }
};

// Recorded ops on its own parameters; forward only.
class OpsBlock : public Module {
 public:
  explicit OpsBlock(std::string name) : Module(std::move(name)) {
    ln_w_ = add_parameter("ln.weight", {kWidth}, ParamInit::ones());
    ln_b_ = add_parameter("ln.bias", {kWidth}, ParamInit::zeros());
    w1_ = add_parameter("fc1.weight", {kHidden, kWidth}, ParamInit::normal(0.3f));
    b1_ = add_parameter("fc1.bias", {kHidden}, ParamInit::zeros());
    w2_ = add_parameter("fc2.weight", {kWidth, kHidden}, ParamInit::normal(0.3f));
    b2_ = add_parameter("fc2.bias", {kWidth}, ParamInit::zeros());
  }
  Tensor forward(Context& ctx, const Tensor& x) override {
    Tensor h = fn::gelu(ctx, fn::linear(ctx, fn::layer_norm(ctx, x, *ln_w_, *ln_b_, 1e-5f), *w1_, b1_));
    return fn::add(ctx, x, fn::linear(ctx, h, *w2_, b2_));
  }

 private:
  Parameter *ln_w_, *ln_b_, *w1_, *b1_, *w2_, *b2_;
};

// Two blocks and a head, as a classifier over [B, kWidth] features.
template <typename BlockT>
class Classifier : public Module {
 public:
  Classifier() : Module("") {
    for (int i = 0; i < 2; ++i) blocks_.push_back(add_child<BlockT>("blocks." + std::to_string(i)));
    head_ = add_child<Linear>("head", kWidth, 3, true, 0.3f);
  }
  Tensor forward(Context& ctx, const Tensor& x) override {
    Tensor h = x;
    for (Module* b : blocks_) h = ctx.forward(*b, h);
    return ctx.forward(*head_, h);
  }
  std::vector<Module*> checkpointable_layers() override { return blocks_; }

 private:
  std::vector<Module*> blocks_;
  Module* head_;
};

struct Pass {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
};

template <typename BlockT>
Pass run_block() {
  CpuBackend backend;
  BlockT block("b");
  testing::materialise_parameters(block, backend, 9);
  Context ctx(backend, DType::kF32);
  const Tensor x = upload(backend, random_values(4 * kWidth, 1), {2, 2, kWidth});
  Pass out;
  const Tensor y = ctx.forward(block, x);
  out.y = download_fp32(backend, y);
  out.dx = download_fp32(backend, ctx.backward(block, upload(backend, random_values(4 * kWidth, 2), y.shape())));
  EXPECT_TRUE(ctx.take_status().ok());
  EXPECT_EQ(ctx.live_frames(), 0u);
  for (Parameter* p : block.parameters()) out.grads.push_back(download_fp32(backend, p->grad));
  return out;
}

TEST(AutogradTest, AForwardOnlyBlockEqualsTheHandWrittenOneBitwise) {
  const Pass hand = run_block<HandBlock>();
  for (const Pass& other : {run_block<ChildrenBlock>(), run_block<OpsBlock>()}) {
    EXPECT_EQ(other.y, hand.y);
    EXPECT_EQ(other.dx, hand.dx);
    ASSERT_EQ(other.grads.size(), hand.grads.size());
    for (size_t i = 0; i < hand.grads.size(); ++i) EXPECT_EQ(other.grads[i], hand.grads[i]) << "parameter " << i;
  }
}

template <typename BlockT>
std::vector<float> train_losses(const EngineConfig& ec) {
  CpuBackend backend;
  auto engine = initialize(std::make_unique<Classifier<BlockT>>(), ec, backend);
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<float> x = random_values(8 * kWidth, 21);
  std::vector<int32_t> labels;
  for (int i = 0; i < 8; ++i) labels.push_back(x[static_cast<size_t>(i * kWidth)] > 0 ? 1 : (i % 3 == 0 ? 2 : 0));
  std::vector<float> losses;
  for (int step = 0; step < 6; ++step) {
    const Batch batch{Tensor::wrap(x.data(), {8, kWidth}, DType::kF32), Tensor::wrap(labels.data(), {8}, DType::kI32)};
    absl::StatusOr<float> l = (*engine)->forward(batch);
    EXPECT_TRUE(l.ok()) << l.status();
    EXPECT_TRUE((*engine)->backward().ok());
    EXPECT_TRUE((*engine)->step().ok());
    losses.push_back(*l);
  }
  return losses;
}

TEST(AutogradTest, AForwardOnlyModelTrainsAtZero3WithCheckpointingAsItsHandWrittenTwin) {
  EngineConfig ec;
  ec.zero.stage = ZeroStage::k3;
  ec.activation_checkpointing.number_checkpoints = 2;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 0.02f};
  const std::vector<float> hand = train_losses<HandBlock>(ec);
  const std::vector<float> ops = train_losses<OpsBlock>(ec);
  EXPECT_EQ(ops, hand);
  EXPECT_EQ(train_losses<ChildrenBlock>(ec), hand);
  ASSERT_EQ(ops.size(), 6u);
  EXPECT_LT(ops.back(), ops.front());
}

// A kernel called directly inside a forward-only module records nothing: a
// gradient that would have to pass through its result is an error naming the
// module and the op it fed, and so is an output no recorded op made.
TEST(AutogradTest, AnOpWithNoBackwardRuleIsAnErrorNamingTheModuleAndTheOp) {
  CpuBackend backend;
  FnModule feeds("blocks.3.mixer", [](Context& c, const Tensor& x, FnModule& m) {
    Tensor g = c.activation(x.shape());
    c.ops().gelu_forward(x, g);  // no rule recorded
    return fn::linear(c, g, m.p(0));
  });
  feeds.param("w", {kFeatures, kFeatures});
  FnModule returns("blocks.4.act", [](Context& c, const Tensor& x, FnModule&) {
    Tensor g = c.activation(x.shape());
    c.ops().gelu_forward(x, g);
    return g;
  });
  for (FnModule* m : {&feeds, &returns}) {
    testing::materialise_random(*m, backend, 1);
    Context ctx(backend, DType::kF32);
    const Tensor x = upload(backend, random_values(kRows * kFeatures, 3), {kRows, kFeatures});
    const Tensor y = ctx.forward(*m, x);
    ctx.backward(*m, upload(backend, random_values(static_cast<size_t>(y.numel()), 4), y.shape()));
    const absl::Status s = ctx.take_status();
    ASSERT_FALSE(s.ok()) << m->name();
    EXPECT_NE(s.message().find(m->name() + ": "), std::string_view::npos) << s;
    EXPECT_NE(s.message().find("no backward rule"), std::string_view::npos) << s;
    if (m == &feeds) {
      EXPECT_NE(s.message().find("input 0 of linear blocks.3.mixer.w"), std::string_view::npos) << s;
    }
    EXPECT_EQ(ctx.live_frames(), 0u);
  }
}

// A parameter whose use backward never reaches is named on stderr once (not
// again on the next backward); a frozen one (no gradient) is not named. The
// unreached use is an op's (its output dropped) or a child call's.
TEST(AutogradTest, AParameterBackwardNeverReachesIsWarnedAboutOnceByName) {
  CpuBackend backend;
  FnModule child("blocks.7.unused_child", [](Context& c, const Tensor& x, FnModule& m) {
    return fn::linear(c, x, m.p(0));
  });
  child.param("weight", {kFeatures, kFeatures});
  FnModule m("blocks.7", [&child](Context& c, const Tensor& x, FnModule& self) {
    fn::linear(c, x, self.p(0));  // dropped: backward never reaches it
    fn::linear(c, x, self.p(1));  // dropped, but frozen
    c.forward(child, x);          // dropped too
    return fn::linear(c, x, self.p(2));
  });
  m.param("dropped.weight", {kFeatures, kFeatures});
  m.param("frozen.weight", {kFeatures, kFeatures});
  m.param("used.weight", {kFeatures, kFeatures});
  testing::materialise_random(m, backend, 1);
  testing::materialise_random(child, backend, 2);
  m.p(1).grad = Tensor();
  Context ctx(backend, DType::kF32);
  const Tensor x = upload(backend, random_values(kRows * kFeatures, 3), {kRows, kFeatures});
  std::string warnings;
  for (int pass = 0; pass < 2; ++pass) {
    ::testing::internal::CaptureStderr();
    const Tensor y = ctx.forward(m, x);
    ctx.backward(m, upload(backend, random_values(static_cast<size_t>(y.numel()), 4), y.shape()));
    warnings += ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(ctx.take_status().ok());
    // The unreached child ran its backward from a zero gradient: no frame
    // left behind (the engine checks), and its weight's gradient stays zero.
    EXPECT_EQ(ctx.live_frames(), 0u);
    for (float g : download_fp32(backend, child.p(0).grad)) ASSERT_EQ(g, 0.0f);
  }
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = warnings.find(what); at != std::string::npos; at = warnings.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("parameter blocks.7.dropped.weight is used by blocks.7 "), 1u) << warnings;
  EXPECT_EQ(count("parameter blocks.7.unused_child.weight is used by blocks.7.unused_child "), 1u) << warnings;
  EXPECT_EQ(count("frozen.weight"), 0u) << warnings;
  EXPECT_EQ(count("used.weight"), 0u) << warnings;
}

// The engine writes dlogits over the logits (the loss's in-place gradient)
// before backward; with logit soft-capping the model's last op is softcap,
// whose rule must not read its output then.
TEST(AutogradTest, SoftcapsRuleHoldsWhenTheLossGradientOverwritesItsOutput) {
  CpuBackend backend;
  FnModule m("", [](Context& c, const Tensor& x, FnModule&) { return fn::softcap(c, fn::scale(c, x, 2.0f), 0.8f); });
  Context ctx(backend, DType::kF32);
  const Tensor x = upload(backend, random_values(30, 3), {2, 3, 5});
  const std::vector<float> r = random_values(30, 5);
  Tensor y = ctx.forward(m, x);
  const std::vector<float> want = download_fp32(backend, ctx.backward(m, upload(backend, r, y.shape())));
  y = ctx.forward(m, x);
  upload_fp32(backend, r, y);  // as the engine does
  EXPECT_EQ(download_fp32(backend, ctx.backward(m, y)), want);
  EXPECT_TRUE(ctx.take_status().ok());
}

}  // namespace
}  // namespace zero
