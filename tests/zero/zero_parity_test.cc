// Every ZeRO stage on W ranks trains what one rank trains on the same global
// batch: a GPT with an odd parameter count (3130, so stages 1-2 pad the flat
// buffer to a multiple of 2W and stage 3 pads every parameter to a multiple
// of W), global batch 12 split as 12/W sequences per rank.
//
// Per step: the loss (mean over the global batch) matches the single-rank run
// within 1e-5 relative and the gradient norm within 5e-5 (the norm is the more
// sensitive of the two to the trajectories' drift); at step 1, before any
// drift, the norm agrees across all stages and with one rank within 1e-6.
// After every step the parameters are bitwise identical on all ranks; at the
// end the fp32 master weights match within 1e-5 of the largest. Not bitwise
// against one rank:
// with W ranks each dW is a sum of W partial GEMMs over b rows, added by the
// all-reduce, instead of one GEMM over W*b rows, so fp32 sums are rounded in
// a different order (differences of ~1e-7 relative per step).
//
// With dropout 0.1 the same holds at every stage: a dropout mask is keyed by
// the global sample index (kernels/dropout_mask.h), so W ranks at micro-batch
// 12/W draw exactly the masks one rank draws at 12.
//
// The Llama family (ZeroLlamaParityTest: RMSNorm, RoPE, SwiGLU, 4 query heads
// sharing 2 key/value heads, an untied head) the same, at every stage.
//
// With Lion (ZeroLionParityTest) too, at every stage, with and without
// overlap and accumulation, but for the attention key biases: their true
// gradient is 0, and Lion steps them by +-lr on the sign of rounding noise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::fnv;
using testing::world;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 10, .vocab_size = 37, .seq_len = 8};
constexpr int64_t kGlobalBatch = 12;
constexpr int kSteps = 20;

// Each row counts up from its own start: a pattern the model can learn.

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> master;  // per parameter, at the end
  std::vector<std::string> names;          // of those parameters
  bool ranks_identical = true;
};


// SGD with momentum rather than Adam: Adam divides by sqrt(v), so a weight
// whose gradient is exactly 0 in real arithmetic (the attention key bias:
// softmax ignores a per-row constant) moves by +-lr on rounding noise alone,
// in a different direction for every summation order. SGD's update is
// linear in the gradient, so the weights compare tightly.
const OptimizerConfig kSgd{.type = OptimizerType::kSGD, .lr = 0.1f, .weight_decay = 0.01f, .momentum = 0.9f};

// predivide > 0: prescale_gradients with that gradient_predivide_factor.
RunResult train(EngineConfig ec, Communicator* comm, int64_t accumulation, double predivide = 0,
                float dropout = 0.0f, const OptimizerConfig& optimizer = kSgd, const GptConfig& arch = kModel) {
  const int world_size = comm ? comm->world_size() : 1, rank = comm ? comm->rank() : 0;
  ec.micro_batch_size = kGlobalBatch / world_size;
  ec.gradient_accumulation_steps = accumulation;
  ec.pre_divide = predivide > 0 ? predivide : world_size;
  ec.post_reduce_scale = predivide > 0 ? static_cast<float>(predivide / world_size) : 1.0f;
  ec.optimizer = optimizer;
  ec.gradient_clipping = 1.0f;
  CpuBackend backend;
  GptConfig model = arch;
  model.dropout = dropout;
  auto engine = initialize(std::make_unique<Gpt>(model), ec, backend, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  RunResult out;
  testing::CountingRows rows{model.seq_len, model.vocab_size};
  for (int step = 0; step < kSteps; ++step) {
    StepResult r;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      const int64_t first = ((step * accumulation + micro) * world_size + rank) * ec.micro_batch_size;
      (*engine)->forward(rows.make(first, ec.micro_batch_size)).value();
      EXPECT_TRUE((*engine)->backward().ok());
      absl::StatusOr<StepResult> s = (*engine)->step();
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) r = *s;
    }
    out.losses.push_back(r.loss);
    out.norms.push_back(r.grad_norm);
    if (comm != nullptr) {
      // Every rank's view of every parameter, hashed; min == max across ranks.
      uint64_t h = 0xcbf29ce484222325ull;
      for (Parameter* p : (*engine)->model().parameters()) {
        absl::StatusOr<std::vector<float>> v = (*engine)->state().gather_parameter(*p);
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) h = fnv(*v, h);
      }
      const double hv = static_cast<double>(h >> 12);  // 52 bits survive a double
      const double lo = -comm->all_reduce_max(-hv).value(), hi = comm->all_reduce_max(hv).value();
      out.ranks_identical = out.ranks_identical && lo == hi;
    }
  }
  for (Parameter* p : (*engine)->model().parameters()) {
    absl::StatusOr<std::vector<float>> v = (*engine)->gather_master(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    out.master.push_back(v.ok() ? *v : std::vector<float>());
    out.names.push_back(p->name());
  }
  return out;
}

const RunResult& reference(int64_t accumulation, float dropout = 0.0f) {
  static std::map<std::pair<int64_t, float>, RunResult> cache;
  const std::pair<int64_t, float> key{accumulation, dropout};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, train(EngineConfig{}, nullptr, accumulation, 0, dropout)).first;
  return it->second;
}

// Whether element j of parameter `name` is an attention key bias, whose
// gradient is 0 in real arithmetic (softmax ignores a per-row constant) and
// rounding noise in fp32 (the K third of c_attn's bias).
bool key_bias(const std::string& name, size_t j) {
  const std::string suffix = "attn.c_attn.bias";
  const size_t c = static_cast<size_t>(kModel.d_model);
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         j >= c && j < 2 * c;
}

// noise_bound >= 0: the key biases (see key_bias) are held to that absolute
// bound instead of the master weights' 1e-5 (a sign-based update moves them on
// rounding noise, differently for every summation order).
void expect_matches(const RunResult& got, const RunResult& ref, const std::string& what, double noise_bound = -1) {
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * ref.losses[s]) << what << " step " << s + 1;
    EXPECT_NEAR(got.norms[s], ref.norms[s], (s == 0 ? 1e-6 : 5e-5) * ref.norms[s]) << what << " step " << s + 1;
  }
  EXPECT_TRUE(got.ranks_identical) << what << ": parameters differ across ranks";
  double max_abs = 0, max_diff = 0, max_noise = 0;
  for (size_t i = 0; i < ref.master.size(); ++i)
    for (size_t j = 0; j < ref.master[i].size() && j < got.master[i].size(); ++j) {
      max_abs = std::max(max_abs, std::abs(double(ref.master[i][j])));
      const double d = std::abs(double(got.master[i][j]) - ref.master[i][j]);
      if (noise_bound >= 0 && key_bias(ref.names[i], j)) {
        max_noise = std::max(max_noise, d);
      } else {
        max_diff = std::max(max_diff, d);
      }
    }
  EXPECT_LE(max_diff, 1e-5 * max_abs) << what << ": final master weights";
  if (noise_bound >= 0) {
    EXPECT_LE(max_noise, noise_bound) << what << ": final key biases";
  }
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.1) << "the reference run learns";
}

struct Case {
  int stage;
  bool overlap;
  int64_t accumulation;
  int64_t bucket;  // reduce/allgather/prefetch bucket elements: small, so several buckets exist
};

class ZeroParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroParityTest, MatchesOneRankOnTheSameGlobalBatch) {
  const Case c = GetParam();
  EngineConfig ec;
  ec.zero.stage = zero_stage(c.stage);
  ec.zero.overlap_comm = c.overlap;
  ec.zero.reduce_bucket_size = c.bucket;
  ec.zero.allgather_bucket_size = c.bucket;
  ec.zero.prefetch_bucket_size = c.bucket;
  ec.zero.param_persistence_threshold = 20;  // the layer norms and biases stay gathered
  ec.zero.max_reuse_distance = 500;
  ec.zero.sub_group_size = 1000;
  const RunResult got = train(ec, &world(), c.accumulation);
  expect_matches(got, reference(c.accumulation),
                 "stage " + std::to_string(c.stage) + (c.overlap ? " overlap" : "") + " on " +
                     std::to_string(world().world_size()) + " ranks");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "stage" + std::to_string(c.stage) + (c.overlap ? "_overlap" : "") + "_gas" + std::to_string(c.accumulation) +
         "_bucket" + std::to_string(c.bucket);
}

INSTANTIATE_TEST_SUITE_P(AllStages, ZeroParityTest,
                         ::testing::Values(Case{0, false, 1, 500}, Case{0, true, 2, 500}, Case{1, false, 1, 500},
                                           Case{1, true, 2, 500}, Case{2, false, 1, 500}, Case{2, true, 2, 500},
                                           Case{2, true, 1, 500000000}, Case{3, false, 1, 500},
                                           Case{3, true, 2, 500}),
                         case_name);

TEST(ZeroDropoutParityTest, EveryStageMatchesOneRankWithDropout) {
  const float p = 0.1f;
  const RunResult& ref = reference(2, p);
  EXPECT_NE(ref.losses, reference(2).losses) << "dropout changes nothing";
  for (int stage : {0, 1, 2, 3}) {
    EngineConfig ec;
    ec.zero.stage = zero_stage(stage);
    ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = ec.zero.prefetch_bucket_size = 500;
    ec.zero.param_persistence_threshold = 20;
    const RunResult got = train(ec, &world(), 2, 0, p);
    expect_matches(got, ref,
                   "dropout, stage " + std::to_string(stage) + " on " + std::to_string(world().world_size()) + " ranks");
  }
}

TEST(ZeroVariantsTest, ReduceScatterOffAndPrescaleGiveTheSameTraining) {
  EngineConfig ec;
  ec.zero.stage = ZeroStage::k2;
  ec.zero.reduce_scatter = false;  // all-reduce each bucket, keep this rank's part
  ec.zero.reduce_bucket_size = 700;
  expect_matches(train(ec, &world(), 1), reference(1), "stage 2 reduce_scatter=false");
  ec.zero.stage = ZeroStage::k3;
  ec.zero.param_persistence_threshold = 0;
  expect_matches(train(ec, &world(), 1), reference(1), "stage 3 reduce_scatter=false");
  // prescale_gradients with gradient_predivide_factor 2: / 2 before, x 2/W after.
  EngineConfig pre;
  pre.zero.stage = ZeroStage::k1;
  expect_matches(train(pre, &world(), 1, 2.0), reference(1), "stage 1 prescale_gradients");
}

// Lion on W ranks against one rank. Its update is lr * sign(c), so it is not
// in the SGD parametrisation above: the key biases (zero true gradient) step
// by +-lr on rounding noise in a different direction for every summation
// order. They do not change the loss, so losses and gradient norms are held
// to the same bounds as SGD's, the parameters to bitwise identity across
// ranks, the master weights to 1e-5 of the largest except the key biases,
// which can only be bounded by Lion's own step: 2 lr (1 + wd) per step.
TEST(ZeroLionParityTest, EveryStageMatchesOneRankAndLearns) {
  const OptimizerConfig lion{.type = OptimizerType::kLion, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f,
                             .weight_decay = 0.1f};
  const double noise_bound = 2.0 * lion.lr * (1.0 + lion.weight_decay) * kSteps;
  const RunResult ref[2] = {train(EngineConfig{}, nullptr, 1, 0, 0.0f, lion),
                            train(EngineConfig{}, nullptr, 2, 0, 0.0f, lion)};
  for (const Case& c : {Case{0, false, 1, 500}, Case{1, true, 2, 500}, Case{2, false, 1, 500},
                        Case{2, true, 2, 500}, Case{3, false, 1, 500}, Case{3, true, 2, 500}}) {
    EngineConfig ec;
    ec.zero.stage = zero_stage(c.stage);
    ec.zero.overlap_comm = c.overlap;
    ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = ec.zero.prefetch_bucket_size = c.bucket;
    ec.zero.param_persistence_threshold = 20;
    const RunResult got = train(ec, &world(), c.accumulation, 0, 0.0f, lion);
    expect_matches(got, ref[c.accumulation - 1],
                   "Lion, stage " + std::to_string(c.stage) + (c.overlap ? " overlap" : "") + ", " +
                       std::to_string(c.accumulation) + " micro-steps on " + std::to_string(world().world_size()) +
                       " ranks",
                   noise_bound);
  }
  // Lion learns: the loss falls well below its start (expect_matches asks 0.1).
  EXPECT_LT(ref[0].losses.back(), 0.7 * ref[0].losses.front());
}

TEST(ZeroLlamaParityTest, EveryStageMatchesOneRank) {
  const GptConfig llama{.arch = ModelArch::kLlama, .n_layer = 2, .n_head = 4, .d_model = 16, .vocab_size = 37,
                        .seq_len = 8, .n_kv_head = 2, .d_ff = 24};
  const RunResult ref = train(EngineConfig{}, nullptr, 2, 0, 0.0f, kSgd, llama);
  for (const Case& c : {Case{0, false, 2, 500}, Case{1, true, 2, 500}, Case{2, false, 2, 500}, Case{3, false, 2, 500},
                        Case{3, true, 2, 500}}) {
    EngineConfig ec;
    ec.zero.stage = zero_stage(c.stage);
    ec.zero.overlap_comm = c.overlap;
    ec.zero.reduce_bucket_size = ec.zero.allgather_bucket_size = ec.zero.prefetch_bucket_size = c.bucket;
    ec.zero.param_persistence_threshold = 20;
    const RunResult got = train(ec, &world(), c.accumulation, 0, 0.0f, kSgd, llama);
    expect_matches(got, ref,
                   "Llama, stage " + std::to_string(c.stage) + (c.overlap ? " overlap" : "") + " on " +
                       std::to_string(world().world_size()) + " ranks");
  }
  EXPECT_EQ(ref.names.front(), "embed_tokens.weight");
  EXPECT_EQ(ref.names.back(), "lm_head.weight");
}

}  // namespace
}  // namespace zero
