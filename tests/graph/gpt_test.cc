// The GPT model end to end on the CPU backend, against the double-precision
// reference GPT in tests/reference:
//  * the forward loss equals the reference loss (fp32 vs double: 1e-5 rel);
//  * every gradient element equals a central finite difference of the
//    reference loss (in double, h = 1e-6, so the FD error is ~1e-9 and the
//    comparison measures our fp32 backward: tolerance 2e-4 of the largest
//    gradient magnitude, fp32 round-off through ~10 layers of ops);
//  * the same with dropout 0.2: the reference applies the masks of
//    kernels/dropout_mask.h under the engine's key (seed, site, global sample),
//    which are fixed given the key, so finite differences still apply; the
//    loss differs from the dropout-free one (the masks are really applied);
//  * evaluation runs without dropout (its loss is the dropout-free loss);
//  * training lowers the loss on a fixed batch;
//  * logit_softcap turns each logit of the same model into cap tanh(y / cap).
#include <gtest/gtest.h>

#include <cmath>

#include "graph/build_model.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/reference/reference_ops.h"
#include "tests/testing/parameters.h"

namespace zero {
namespace {

struct TinyGpt {
  GptConfig cfg{.n_layer = 2, .n_head = 2, .d_model = 8, .vocab_size = 11, .seq_len = 5};
  int64_t batch = 2;
  std::vector<int32_t> inputs, targets;
  TinyGpt() {
    for (int64_t i = 0; i < batch * cfg.seq_len; ++i) {
      inputs.push_back(static_cast<int32_t>((i * 7 + 3) % cfg.vocab_size));
      targets.push_back(static_cast<int32_t>((i * 5 + 1) % cfg.vocab_size));
    }
  }
  Batch make_batch() {
    return {Tensor::wrap(inputs.data(), {batch, cfg.seq_len}, DType::kI32),
            Tensor::wrap(targets.data(), {batch, cfg.seq_len}, DType::kI32)};
  }
  ref::GptShape shape() const {
    return {cfg.n_layer, cfg.n_head, cfg.d_model, cfg.vocab_size, cfg.seq_len};
  }
};

std::unique_ptr<Engine> make_engine(Backend& backend, const GptConfig& cfg, EngineConfig ec = {}) {
  auto engine = initialize(std::make_unique<Gpt>(cfg), ec, backend);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(engine).value();
}

// Forward loss and every gradient of t's GPT against the double reference
// (with t.cfg.dropout's masks under the engine's default seed, micro-step 0).
void expect_matches_reference(TinyGpt& t) {
  CpuBackend backend;
  auto engine = make_engine(backend, t.cfg);
  std::vector<Parameter*> params = engine->model().parameters();
  std::vector<ref::Vec> values;
  for (Parameter* p : params) {
    std::vector<float> v = engine->master_values(*p);
    values.emplace_back(v.begin(), v.end());
  }
  ref::GptShape shape = t.shape();
  shape.dropout = t.cfg.dropout;
  shape.dropout_seed = EngineConfig{}.seed;
  shape.first_sample = 0;
  const double ref_loss = ref::gpt_loss(shape, values, t.inputs, t.targets, t.batch);
  const float loss = engine->forward(t.make_batch()).value();
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));
  EXPECT_TRUE(engine->backward().ok());

  double max_grad = 0.0;
  std::vector<ref::Vec> numeric(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    numeric[i] = ref::numeric_vjp(
        [&](const ref::Vec& x) {
          std::vector<ref::Vec> vals = values;
          vals[i] = x;
          return ref::Vec{ref::gpt_loss(shape, vals, t.inputs, t.targets, t.batch)};
        },
        values[i], {1.0});
    for (double g : numeric[i]) max_grad = std::max(max_grad, std::abs(g));
  }
  ASSERT_GT(max_grad, 1e-3);
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> g = engine->grad_values(*params[i]);
    for (size_t j = 0; j < g.size(); ++j) {
      ASSERT_NEAR(g[j], numeric[i][j], 2e-4 * max_grad) << params[i]->name() << "[" << j << "]";
    }
  }
}

TEST(GptTest, ForwardAndGradientsMatchDoubleReference) {
  TinyGpt t;
  expect_matches_reference(t);
}

TEST(GptTest, ForwardAndGradientsMatchDoubleReferenceWithDropout) {
  TinyGpt t;
  t.cfg.dropout = 0.2f;
  expect_matches_reference(t);
}

TEST(GptTest, DropoutChangesTrainingLossButNotEvaluation) {
  CpuBackend backend;
  TinyGpt t;
  auto plain = make_engine(backend, t.cfg);
  GptConfig with_dropout = t.cfg;
  with_dropout.dropout = 0.2f;
  auto dropped = make_engine(backend, with_dropout);
  const Batch batch = t.make_batch();
  EXPECT_EQ(dropped->evaluate(batch), plain->evaluate(batch));
  EXPECT_NE(dropped->forward(batch), plain->forward(batch));
}

TEST(GptTest, DropoutModulesOnlyWithDropout) {
  GptConfig cfg{.n_layer = 1, .n_head = 2, .d_model = 8, .vocab_size = 11, .seq_len = 5};
  auto dropout_names = [](Gpt& model) {
    std::vector<std::string> names;
    for (Module* m : model.modules())
      if (dynamic_cast<Dropout*>(m) != nullptr) names.push_back(m->name());
    return names;
  };
  Gpt plain(cfg);
  EXPECT_TRUE(dropout_names(plain).empty());
  cfg.dropout = 0.1f;
  Gpt dropped(cfg);
  EXPECT_EQ(dropout_names(dropped),
            (std::vector<std::string>{"drop", "h.0.attn.resid_dropout", "h.0.mlp.dropout"}));
  EXPECT_EQ(dropped.parameters().size(), plain.parameters().size());
}

TEST(GptTest, ParameterNamesFollowGpt2) {
  GptConfig cfg{.n_layer = 1, .n_head = 2, .d_model = 8, .vocab_size = 11, .seq_len = 5};
  Gpt model(cfg);
  std::vector<std::string> names;
  int64_t total = 0;
  for (Parameter* p : model.parameters()) {
    names.push_back(p->name());
    total += p->numel();
  }
  const std::vector<std::string> expected = {
      "wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight",
      "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias", "h.0.ln_2.weight",
      "h.0.ln_2.bias", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias", "h.0.mlp.c_proj.weight",
      "h.0.mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(total, cfg.num_parameters());
  EXPECT_EQ(GptConfig{}.num_parameters(), 124475904);  // GPT-2 124M with vocab 50304, T 1024
}

// logit_softcap: the same model's logits, each as cap tanh(logit / cap).
TEST(GptTest, LogitSoftcapCapsTheSameModelsLogits) {
  CpuBackend backend;
  TinyGpt t;
  GptConfig capped = t.cfg;
  capped.logit_softcap = 0.05f;
  Gpt plain_model(t.cfg), capped_model(capped);
  std::vector<std::vector<float>> logits;
  for (Gpt* m : {&plain_model, &capped_model}) {
    testing::materialise_parameters(*m, backend, 7);
    Context ctx(backend, DType::kF32);
    ctx.set_grad_enabled(false);
    Tensor ids = backend.empty({t.batch, t.cfg.seq_len}, DType::kI32, MemCategory::kActivations);
    backend.copy(ids, t.make_batch().inputs);
    const Tensor y = ctx.forward(*m, ids);
    logits.push_back(download_fp32(backend, y.view({y.numel()})));
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  double largest = 0.0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    largest = std::max(largest, std::abs(static_cast<double>(logits[0][i])));
    EXPECT_NEAR(logits[1][i], 0.05 * std::tanh(logits[0][i] / 0.05), 1e-6) << i;
  }
  EXPECT_GT(largest, 0.05);  // some logits are really capped
}

TEST(GptTest, LossFallsOnAFixedBatch) {
  CpuBackend backend;
  TinyGpt t;
  EngineConfig ec;
  ec.optimizer.lr = 1e-2f;
  auto engine = make_engine(backend, t.cfg, ec);
  const Batch batch = t.make_batch();
  const float first = engine->forward(batch).value();
  EXPECT_TRUE(engine->backward().ok());
  ASSERT_TRUE(engine->step().ok());
  float last = first;
  for (int i = 0; i < 60; ++i) {
    last = engine->forward(batch).value();
    EXPECT_TRUE(engine->backward().ok());
    ASSERT_TRUE(engine->step().ok());
  }
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

// build_model is where every program builds a model for a mesh: a split the
// model cannot take is a Status naming the field, never a failed check.
TEST(BuildModelTest, ASplitTheModelCannotTakeIsAnErrorNamingTheField) {
  GptConfig llama{.arch = ModelArch::kLlama, .n_layer = 2, .n_head = 4, .d_model = 32, .vocab_size = 64,
                  .seq_len = 8, .n_kv_head = 2};
  std::unique_ptr<DeviceMesh> tp4 = DeviceMesh::dry_run({1, 4, 1}, 1).value();
  absl::StatusOr<std::unique_ptr<Gpt>> m = build_model(llama, *tp4);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("tensor_parallel.autotp_size: 4"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("key/value heads"), std::string::npos) << m.status();

  std::unique_ptr<DeviceMesh> pp4 = DeviceMesh::dry_run({1, 1, 4}, 3).value();
  m = build_model(llama, *pp4);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();

  // What it builds: this rank's stage, split over its tensor group.
  std::unique_ptr<DeviceMesh> mesh = DeviceMesh::dry_run({1, 2, 2}, 3).value();  // tensor rank 1, stage 1
  m = build_model(llama, *mesh);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->pipeline_stage_index(), 1);
  EXPECT_EQ((*m)->pipeline_stages(), 2);
  ASSERT_TRUE((*m)->logits_vocab_slice().has_value());
  EXPECT_EQ((*m)->logits_vocab_slice()->first, 32);
}

}  // namespace
}  // namespace zero
