// Automatic backward (graph/tape.h, graph/functional.h), as a user meets it:
//  * every op's recorded rule (graph/functional.h: linear, add, gelu, the
//    norms, swiglu, dropout, matmul, causal softmax, transpose, RoPE, the qkv
//    split) gives the gradients central differences of its forward give, for
//    the input and every parameter (fp32 forward, the loss sum(r * y) summed
//    in double, h = 1e-2);
//  * a module written with forward only, from recorded ops and from child
//    modules, computes bit for bit what the same block with a hand-written
//    backward computes: output, dx and every parameter gradient;
//  * such a model trains through the engine at ZeRO-3 with activation
//    checkpointing, its losses bit for bit the hand-written twin's;
//  * a forward that feeds a kernel called directly (no backward rule) into a
//    recorded op, or returns its result, is an error at backward naming the
//    module and the op, not a crash or a silent zero gradient.
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
#include "tests/testing/parameters.h"

namespace zero {
namespace {

// A module whose forward is a function of its input and its parameters,
// written with recorded ops only (no backward of its own).
class FnModule : public Module {
 public:
  using Body = std::function<Tensor(Context&, const Tensor&, FnModule&)>;
  FnModule(std::string name, Body body) : Module(std::move(name)), body_(std::move(body)) {}
  Parameter* param(const std::string& name, Shape shape, ParamInit init = ParamInit::normal(0.5f)) {
    return params_.emplace_back(add_parameter(name, std::move(shape), init));
  }
  Parameter& p(size_t i) { return *params_.at(i); }
  Tensor forward(Context& ctx, const Tensor& x) override { return body_(ctx, x, *this); }

 private:
  Body body_;
  std::vector<Parameter*> params_;
};

std::vector<float> random_values(size_t n, uint64_t seed, float mean = 0.0f, float std = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void materialise(Module& m, Backend& backend, uint64_t seed) {
  for (Parameter* p : m.parameters()) {
    const bool norm_weight = p->name().find("norm") != std::string::npos && p->shape().size() == 1;
    const std::vector<float> v = random_values(static_cast<size_t>(p->numel()), seed++, norm_weight ? 1.0f : 0.0f, 0.5f);
    p->data = backend.empty(p->shape(), DType::kF32, MemCategory::kParameters);
    upload_fp32(backend, v, p->data);
    p->grad = backend.zeros(p->shape(), DType::kF32, MemCategory::kGradients);
  }
}

Tensor upload(Backend& backend, const std::vector<float>& v, const Shape& shape) {
  Tensor t = backend.empty(shape, DType::kF32, MemCategory::kActivations);
  upload_fp32(backend, v, t);
  return t;
}

// sum(r * forward(x)) in double, as training runs it (dropout active; the
// frames it leaves are dropped).
double loss(Context& ctx, Module& m, Backend& backend, const Tensor& x, const std::vector<float>& r) {
  const std::vector<float> y = download_fp32(backend, ctx.forward(m, x));
  ctx.clear();
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

struct OpCase {
  std::string name;
  std::function<void(FnModule&)> params;
  FnModule::Body body;
  Shape input = {2, 3, 5};
};

RopeFreqs small_rope() { return rope_frequencies(4, 10000.0, {}).value(); }

constexpr int64_t kRows = 6, kFeatures = 5;

std::vector<OpCase> op_cases() {
  return {
      {"linear", [](FnModule& m) { m.param("w", {kFeatures, kFeatures}); m.param("b", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::linear(c, x, m.p(0), &m.p(1)); }},
      {"linear_no_bias", [](FnModule& m) { m.param("w", {3, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::linear(c, x, m.p(0)); }},
      {"add_gelu", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::add(c, x, fn::gelu(c, x)); }},
      {"layer_norm", [](FnModule& m) { m.param("norm.weight", {kFeatures}); m.param("norm.bias", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::layer_norm(c, x, m.p(0), m.p(1), 1e-5f); }},
      {"rms_norm", [](FnModule& m) { m.param("norm.weight", {kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::rms_norm(c, x, m.p(0), 1e-6f); }},
      {"swiglu", [](FnModule& m) { m.param("w", {kFeatures, kFeatures}); },
       [](Context& c, const Tensor& x, FnModule& m) { return fn::swiglu(c, fn::linear(c, x, m.p(0)), x); }},
      {"dropout", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::dropout(c, x, 0.3f, 4); }},
      // x against itself: both of the rule's GEMMs, and their gradients meeting at x.
      {"matmul_nt_scaled", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) {
         MatmulSpec s;
         s.trans_b = true, s.alpha = 0.7f;
         return fn::matmul(c, x, x, s);
       }},
      {"matmul_tn", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) {
         MatmulSpec s;
         s.trans_a = true;
         return fn::matmul(c, x, fn::gelu(c, x), s);
       }},
      {"causal_softmax", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) { return fn::causal_softmax_(c, fn::add(c, x, x), {2, 4, 4}); },
       {2, 4, 4}},
      {"transpose12", [](FnModule&) {}, [](Context& c, const Tensor& x, FnModule&) { return fn::transpose12(c, x); },
       {2, 3, 2, 5}},
      {"rope", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) { return fn::rope_(c, fn::gelu(c, x), small_rope()); },
       {1, 2, 3, 4}},
      // q + gelu(k + gelu(v)): each of q, k, v its own gradient, merged into qkv's.
      {"split_qkv", [](FnModule&) {},
       [](Context& c, const Tensor& x, FnModule&) {
         std::array<Tensor, 3> qkv = fn::split_qkv(c, x, 2, 2);
         return fn::add(c, qkv[0], fn::gelu(c, fn::add(c, qkv[1], fn::gelu(c, qkv[2]))));
       },
       {1, 3, 12}},
  };
}

class OpRuleTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpRuleTest, GradientsMatchCentralDifferences) {
  const OpCase& op = GetParam();
  CpuBackend backend;
  FnModule m("", op.body);
  op.params(m);
  materialise(m, backend, 11);
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
  const std::vector<float> got_dx = download_fp32(backend, dx);

  const float h = 1e-2f;
  auto expect_derivative = [&](double analytic, double numeric, const std::string& what) {
    EXPECT_NEAR(analytic, numeric, 3e-3 + 2e-2 * std::fabs(numeric)) << op.name << ": " << what;
  };
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<float> plus = xv, minus = xv;
    plus[i] += h, minus[i] -= h;
    const double numeric = (loss(ctx, m, backend, upload(backend, plus, x.shape()), r) -
                            loss(ctx, m, backend, upload(backend, minus, x.shape()), r)) / (2.0 * h);
    expect_derivative(got_dx[i], numeric, "dx[" + std::to_string(i) + "]");
  }
  for (Parameter* p : m.parameters()) {
    const std::vector<float> grad = download_fp32(backend, p->grad);
    std::vector<float> v = download_fp32(backend, p->data);
    for (size_t i = 0; i < v.size(); ++i) {
      const float keep = v[i];
      v[i] = keep + h;
      upload_fp32(backend, v, p->data);
      const double lp = loss(ctx, m, backend, x, r);
      v[i] = keep - h;
      upload_fp32(backend, v, p->data);
      const double lm = loss(ctx, m, backend, x, r);
      v[i] = keep;
      upload_fp32(backend, v, p->data);
      expect_derivative(grad[i], (lp - lm) / (2.0 * h), p->name() + "[" + std::to_string(i) + "]");
    }
  }
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
    materialise(*m, backend, 1);
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

}  // namespace
}  // namespace zero
