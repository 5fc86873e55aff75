// Frozen parameters (Parameter::requires_grad false, graph/freeze.h) at every
// ZeRO stage, on the ranks this binary runs with (1, and 2 under mpirun).
// Two freezes of a small GPT-2 (3130 parameters, tied head):
//  * "front": the embeddings and the first block (wte, wpe, h.0.*), so the
//    tied head is frozen too and only h.1 and ln_f train;
//  * "back": the last block and the final norm (h.1.*, ln_f.*), so every
//    trained parameter's gradient first passes backward through frozen
//    linears and layer norms (dX through a frozen layer).
// What a user would notice:
//  (a) frozen weights are bitwise what they were after N steps, at every
//      stage, with ZeRO-Offload and ZeRO-Infinity too;
//  (b) the losses, gradient norms and trained master weights match a
//      one-rank stage-0 run with the same freeze (zero_parity_test's
//      tolerances), parameters bitwise equal across ranks; offloaded runs
//      are bitwise the resident run of their stage;
//  (c) gradients and optimizer state take exactly the trainable
//      parameters' bytes (the ZeRO formulas over them; parameters keep the
//      frozen ones in the model dtype), and frozen parameters are never
//      reduced: stage 0-2 traffic is an all-reduce of the trainable flat
//      group, stage 3's drops by exactly the frozen parameters'
//      reduce-scatters while every gather stays;
//  (d) the gradient norm is the trainable parameters' part of the unfrozen
//      model's, and their gradients are bitwise the unfrozen model's;
//  (e) a checkpoint resumes bitwise (frozen weights in it, no optimizer state
//      for them), a checkpoint of an unfrozen run loads into a frozen one,
//      and training what a checkpoint had frozen is refused by name;
//  (f) the planner (zero-estimate's dry run) equals the measured peaks;
//  and on 2 ranks the same holds over a tensor group of 2 and over 2
//  pipeline stages (a frozen tied table: its copies skip their sum); and
//  freezing everything (or a whole pipeline stage), ranks that freeze
//  different parameters, a typo'd pattern, or changing requires_grad under a
//  live engine are refused with a message naming the thing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "comm/device_mesh.h"
#include "core/strings.h"
#include "graph/build_model.h"
#include "graph/freeze.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/memory_plan.h"
#include "runtime/engine/model_state_bytes.h"
#include "tests/testing/counting_rows.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/tracked_bytes.h"

namespace zero {
namespace {

using testing::CountingRows;
using testing::fnv;
using testing::world;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 10, .vocab_size = 37, .seq_len = 8};
constexpr int64_t kGlobalBatch = 12;
constexpr int kSteps = 20;

struct Freeze {
  std::string name;
  std::vector<std::string> patterns;
};
const Freeze kFront{"front", {"wte\\.weight", "wpe\\.weight", "h\\.0\\..*"}};
const Freeze kBack{"back", {"h\\.1\\..*", "ln_f\\..*"}};
const Freeze kNone{"none", {}};
// The tied token table and the last block: on 2 pipeline stages both hold a
// frozen copy of the table, and the first stage still trains wpe and h.0.
const Freeze kTable{"table", {"wte\\.weight", "h\\.1\\..*"}};

std::unique_ptr<Gpt> model_with(const Freeze& f, const GptConfig& arch = kModel) {
  auto m = std::make_unique<Gpt>(arch);
  if (!f.patterns.empty()) {
    absl::StatusOr<FreezeCount> c = freeze_matching(*m, f.patterns);
    EXPECT_TRUE(c.ok()) << c.status();
  }
  return m;
}

std::set<std::string> frozen_names(const Freeze& f) {
  std::set<std::string> out;
  const std::unique_ptr<Gpt> m = model_with(f);
  for (Parameter* p : m->parameters())
    if (!p->requires_grad()) out.insert(p->name());
  return out;
}

enum class Offload { kNone, kCpu, kNvme };

struct Case {
  int stage;
  Offload offload = Offload::kNone;
  DType dtype = DType::kF32;  // the model dtype
};

std::string case_name(const Case& c) {
  return cat("stage", c.stage, c.offload == Offload::kCpu ? "_cpu_offload" : c.offload == Offload::kNvme ? "_nvme" : "",
             c.dtype == DType::kF32 ? "" : cat("_", dtype_name(c.dtype)));
}

// A directory every rank sees (the working directory is shared).
std::string shared_dir(const std::string& name) {
  const std::string dir = (std::filesystem::current_path() / cat(name, ".np", world().world_size())).string();
  std::filesystem::create_directories(dir);
  return dir;
}

// zero_parity_test's configuration: SGD with momentum (its update is linear
// in the gradient, so weights compare tightly across summation orders),
// clipping at 1, small buckets, persistent small parameters at stage 3.
// Offload runs go through the device path (the host step), forced.
EngineConfig config(const Case& c, int world_size) {
  EngineConfig ec;
  ec.param_dtype = c.dtype;
  ec.micro_batch_size = kGlobalBatch / world_size;
  ec.pre_divide = world_size;
  ec.optimizer = {.type = OptimizerType::kSGD, .lr = 0.1f, .weight_decay = 0.01f, .momentum = 0.9f};
  ec.gradient_clipping = 1.0f;
  ec.zero.stage = zero_stage(c.stage);
  ec.zero.reduce_bucket_size = 500;
  ec.zero.allgather_bucket_size = 500;
  ec.zero.prefetch_bucket_size = 500;
  ec.zero.param_persistence_threshold = 20;  // the layer norms and biases stay gathered
  ec.zero.max_reuse_distance = 500;
  ec.zero.sub_group_size = 1000;
  if (c.offload != Offload::kNone) {
    ec.force_offload_path = true;
    const bool nvme = c.offload == Offload::kNvme;
    OffloadConfig& o = ec.zero.offload_optimizer;
    o.device = nvme ? OffloadDevice::kNvme : OffloadDevice::kCpu;
    if (nvme) o.nvme_path = shared_dir("frozen_params_test.swap"), o.buffer_count = 4;
    if (c.stage == 3) {
      OffloadConfig& p = ec.zero.offload_param;
      p.device = o.device;
      p.nvme_path = o.nvme_path;
    }
  }
  return ec;
}

std::map<std::string, std::vector<float>> weights(Engine& e) {  // model dtype as fp32 (a collective at stage 3)
  std::map<std::string, std::vector<float>> out;
  for (Parameter* p : e.model().parameters()) {
    absl::StatusOr<std::vector<float>> v = e.state().gather_parameter(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    out[p->name()] = v.ok() ? *v : std::vector<float>();
  }
  return out;
}

std::map<std::string, std::vector<float>> masters(Engine& e) {  // a collective
  std::map<std::string, std::vector<float>> out;
  for (Parameter* p : e.model().parameters()) {
    absl::StatusOr<std::vector<float>> v = e.gather_master(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    out[p->name()] = v.ok() ? *v : std::vector<float>();
  }
  return out;
}

bool same_on_every_rank(const std::map<std::string, std::vector<float>>& w) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& [name, v] : w) h = fnv(v, h);
  return testing::same_everywhere(world(), h);
}

struct RunResult {
  std::vector<double> losses, norms;
  std::map<std::string, std::vector<float>> initial, final_weights, master;
  bool ranks_identical = true;
};

// Steps [from, to) of `engine` on this rank's rows of the global batch.
void run_steps(Engine& engine, int from, int to, RunResult& out, bool check_ranks) {
  const int w = engine.comm().world_size(), r = engine.comm().rank();
  const int64_t micro = engine.config().micro_batch_size;
  CountingRows rows{kModel.seq_len, kModel.vocab_size};
  for (int step = from; step < to; ++step) {
    EXPECT_TRUE(engine.forward(rows.make((step * w + r) * micro, micro)).ok());
    EXPECT_TRUE(engine.backward().ok());
    absl::StatusOr<StepResult> s = engine.step();
    EXPECT_TRUE(s.ok()) << s.status();
    out.losses.push_back(s.ok() ? s->loss : -1.0);
    out.norms.push_back(s.ok() ? s->grad_norm : -1.0);
    if (check_ranks) out.ranks_identical = out.ranks_identical && same_on_every_rank(weights(engine));
  }
}

RunResult train(const EngineConfig& ec, Communicator* comm, const Freeze& f) {
  CpuBackend backend;
  auto engine = initialize(model_with(f), ec, backend, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  RunResult out;
  out.initial = weights(**engine);
  run_steps(**engine, 0, kSteps, out, comm != nullptr);
  out.final_weights = weights(**engine);
  out.master = masters(**engine);
  return out;
}

const RunResult& reference(const Freeze& f) {
  static std::map<std::string, RunResult> cache;
  auto it = cache.find(f.name);
  if (it == cache.end()) it = cache.emplace(f.name, train(config({0}, 1), nullptr, f)).first;
  return it->second;
}

// ---- the API

TEST(FreezeTest, PatternsMatchWholeNamesAndATypoIsRefusedByName) {
  Gpt m(kModel);
  absl::StatusOr<FreezeCount> c = freeze_matching(m, {"h\\.0\\..*", "wte\\.weight"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->per_pattern, (std::vector<int64_t>{12, 1}));  // ln_1, attn (c_attn, c_proj), ln_2, mlp: 6 x (w, b)
  int64_t frozen = 0;
  for (Parameter* p : m.parameters()) {
    const bool want = p->name() == "wte.weight" || p->name().rfind("h.0.", 0) == 0;
    EXPECT_EQ(p->requires_grad(), !want) << p->name();
    frozen += want ? p->numel() : 0;
  }
  EXPECT_EQ(c->elements, frozen);
  EXPECT_EQ(count_trainable(m).frozen, frozen);

  // A pattern must match a whole name: "h.0" alone names no parameter.
  Gpt other(kModel);
  absl::StatusOr<FreezeCount> typo = freeze_matching(other, {"wpe\\.weight", "h\\.0"});
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("freeze pattern \"h\\.0\" matches no parameter"), std::string::npos)
      << typo.status();
  EXPECT_NE(typo.status().message().find("wte.weight"), std::string::npos) << "names some of the model's";
  for (Parameter* p : other.parameters()) EXPECT_TRUE(p->requires_grad()) << p->name() << ": a refusal freezes nothing";
  EXPECT_TRUE(freeze_matching(other, {"h\\.0"}, UnmatchedPattern::kAllow).ok());

  absl::StatusOr<FreezeCount> bad = freeze_matching(other, {"h\\.(0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"h\\.(0\" is not a valid regular expression"), std::string::npos)
      << bad.status();

  // Module-level: a subtree, and back.
  Gpt third(kModel);
  Module* block = third.checkpointable_layers()[1];  // h.1
  ASSERT_TRUE(freeze(*block).ok());
  for (Parameter* p : third.parameters()) EXPECT_EQ(p->requires_grad(), p->name().rfind("h.1.", 0) != 0) << p->name();
  ASSERT_TRUE(set_requires_grad(third, true).ok());
  EXPECT_EQ(count_trainable(third).frozen, 0);
}

TEST(FreezeTest, EverythingFrozenIsRefused) {
  auto m = std::make_unique<Gpt>(kModel);
  ASSERT_TRUE(freeze(*m).ok());
  CpuBackend backend;
  auto engine = initialize(std::move(m), config({1}, world().world_size()), backend, &world());
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("no trainable parameters"), std::string::npos) << engine.status();
  EXPECT_NE(engine.status().message().find("parameters (3130 elements) is frozen"), std::string::npos)
      << engine.status();
}

TEST(FreezeTest, RanksThatFreezeDifferentParametersAreRefusedOnEveryRank) {
  if (world().world_size() == 1) GTEST_SKIP() << "needs 2 ranks";
  CpuBackend backend;
  auto engine = initialize(model_with(world().rank() == 0 ? kFront : kBack), config({2}, world().world_size()),
                           backend, &world());
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("the ranks of a data-parallel group freeze different parameters"),
            std::string::npos)
      << engine.status();
}

TEST(FreezeTest, RequiresGradIsFixedWhileAnEngineHoldsTheModel) {
  CpuBackend backend;
  auto engine = initialize(model_with(kFront), config({2}, world().world_size()), backend, &world());
  ASSERT_TRUE(engine.ok()) << engine.status();
  Parameter* wte = (*engine)->model().parameters().front();
  ASSERT_EQ(wte->name(), "wte.weight");
  const absl::Status s = wte->set_requires_grad(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("parameter wte.weight: cannot unfreeze it while an engine holds the model"),
            std::string::npos)
      << s;
  EXPECT_FALSE(wte->requires_grad());
  EXPECT_FALSE(freeze((*engine)->model()).ok()) << "a refusal, and nothing changes";
  EXPECT_EQ((*engine)->num_trainable_parameters(), count_trainable((*engine)->model()).trainable);
}

// ---- (a), (b): every stage against one rank

class FrozenParityTest : public ::testing::TestWithParam<Case> {};

TEST_P(FrozenParityTest, FrozenWeightsStayAndTheRestTrainsAsOnOneRank) {
  const Case c = GetParam();
#ifndef ZE_HAVE_NVME_OFFLOAD
  if (c.offload == Offload::kNvme) GTEST_SKIP() << "this build has no NVMe offload";
#endif
  for (const Freeze& f : {kFront, kBack}) {
    const std::string what = cat(case_name(c), ", ", f.name, " frozen, on ", world().world_size(), " ranks");
    const std::set<std::string> frozen = frozen_names(f);
    const RunResult got = train(config(c, world().world_size()), &world(), f);
    const RunResult& ref = reference(f);
    ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << what;
    // zero_parity_test's tolerances. With the tied head frozen ("front") the
    // logits stay small and the loss falls slowly (3.614 to 3.599 over the
    // 20 steps); it falls all the same.
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(got.losses[s], ref.losses[s], 1e-5 * ref.losses[s]) << what << " step " << s + 1;
      EXPECT_NEAR(got.norms[s], ref.norms[s], (s == 0 ? 1e-6 : 5e-5) * ref.norms[s]) << what << " step " << s + 1;
    }
    EXPECT_LT(ref.losses.back(), ref.losses.front() - (f.name == "front" ? 0.01 : 1.0)) << f.name << ": it learns";
    EXPECT_TRUE(got.ranks_identical) << what << ": parameters differ across ranks";
    std::map<std::string, std::vector<float>> trained_master, trained_ref;
    for (const auto& [name, v] : got.final_weights) {
      if (frozen.count(name) > 0) {
        EXPECT_EQ(v, got.initial.at(name)) << what << ": frozen " << name << " changed";
        EXPECT_EQ(v, ref.final_weights.at(name)) << what << ": frozen " << name;
        EXPECT_EQ(got.master.at(name), v) << what << ": a frozen parameter's 'master' is its weights";
      } else {
        EXPECT_NE(v, got.initial.at(name)) << what << ": " << name << " did not train";
        trained_master[name] = got.master.at(name);
        trained_ref[name] = ref.master.at(name);
      }
    }
    testing::expect_same_weights(trained_master, trained_ref, what);
    if (c.offload != Offload::kNone) {
      // The host step runs the resident step's kernel on the same values.
      const RunResult resident = train(config({c.stage}, world().world_size()), &world(), f);
      EXPECT_EQ(got.losses, resident.losses) << what << ": offloaded vs resident";
      EXPECT_EQ(got.final_weights, resident.final_weights) << what << ": offloaded vs resident";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllStages, FrozenParityTest,
                         ::testing::Values(Case{0}, Case{1}, Case{2}, Case{3}, Case{2, Offload::kCpu},
                                           Case{3, Offload::kCpu}, Case{3, Offload::kNvme}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---- (d): gradients and their norm

// The unfrozen model's gradients on the whole global batch of step 1, on this
// process alone (one rank, stage 0).
std::map<std::string, std::vector<float>> unfrozen_gradients(const Freeze& f) {
  CpuBackend backend;
  auto engine = initialize(model_with(f), config({0}, 1), backend, nullptr);
  EXPECT_TRUE(engine.ok()) << engine.status();
  CountingRows rows{kModel.seq_len, kModel.vocab_size};
  EXPECT_TRUE((*engine)->forward(rows.make(0, kGlobalBatch)).ok());
  EXPECT_TRUE((*engine)->backward().ok());
  std::map<std::string, std::vector<float>> out;
  for (Parameter* p : (*engine)->model().parameters()) {
    EXPECT_EQ(p->grad.defined(), p->requires_grad()) << p->name();
    if (p->requires_grad()) out[p->name()] = (*engine)->grad_values(*p);
  }
  return out;
}

TEST(FrozenGradientTest, TrainableGradientsAreTheUnfrozenModelsBitwise) {
  const std::map<std::string, std::vector<float>> all = unfrozen_gradients(kNone);
  for (const Freeze& f : {kFront, kBack}) {
    const std::map<std::string, std::vector<float>> some = unfrozen_gradients(f);
    EXPECT_EQ(some.size() + frozen_names(f).size(), all.size()) << f.name;
    for (const auto& [name, g] : some) {
      EXPECT_EQ(g, all.at(name)) << f.name << " frozen: the gradient of " << name;
      double sum = 0;
      for (float x : g) sum += std::abs(x);
      EXPECT_GT(sum, 0.0) << f.name << " frozen: " << name << " gets a gradient (dX reaches it)";
    }
  }
}

class FrozenStageTest : public ::testing::TestWithParam<int> {};

TEST_P(FrozenStageTest, GradientNormIsTheTrainableParametersOnly) {
  const int stage = GetParam();
  const std::map<std::string, std::vector<float>> all = unfrozen_gradients(kNone);
  double full = 0;
  for (const auto& [name, g] : all)
    for (float x : g) full += double(x) * x;
  for (const Freeze& f : {kFront, kBack}) {
    const std::set<std::string> frozen = frozen_names(f);
    double part = 0;
    for (const auto& [name, g] : all)
      if (frozen.count(name) == 0)
        for (float x : g) part += double(x) * x;
    CpuBackend backend;
    auto engine = initialize(model_with(f), config({stage}, world().world_size()), backend, &world());
    ASSERT_TRUE(engine.ok()) << engine.status();
    RunResult r;
    run_steps(**engine, 0, 1, r, false);
    EXPECT_NEAR(r.norms[0], std::sqrt(part), 1e-6 * std::sqrt(part)) << "stage " << stage << ", " << f.name;
    EXPECT_LT(std::sqrt(part), 0.99 * std::sqrt(full)) << f.name << ": the frozen part is not negligible";
  }
}

INSTANTIATE_TEST_SUITE_P(AllStages, FrozenStageTest, ::testing::Values(0, 1, 2, 3));

// ---- (c): bytes held and sent

using testing::Bytes;
using testing::tracked;

// bf16 parameters and gradients, fp32 master and AdamW moments (K = 12),
// nothing persistent at stage 3.
EngineConfig bytes_config(int stage, int w) {
  EngineConfig ec;
  ec.param_dtype = DType::kBF16;
  ec.micro_batch_size = 2;
  ec.pre_divide = w;
  ec.zero.stage = zero_stage(stage);
  ec.zero.reduce_bucket_size = 400;
  ec.zero.param_persistence_threshold = 0;
  return ec;
}

// zero_memory_test's formulas over T trainable and F frozen elements:
//   stage 0: params 2 (T + F),         grads 2 T,       optimizer 12 T
//   stage 1: params 2 (N + F),         grads 2 N,       optimizer 12 N / W
//   stage 2: params 2 (N + F),         grads 2 N / W,   optimizer 12 N / W
//   stage 3: params 2 (S_T + S_F),     grads 2 S_T,     optimizer 12 S_T
// N = T padded to a multiple of 2W (the trainable flat group; frozen ones
// stay whole beside it), S = sum of ceil(numel / W) (per parameter).
Bytes expected_bytes(int stage, const Freeze& f, int w) {
  int64_t t = 0, fz = 0, st = 0, sf = 0;
  const std::unique_ptr<Gpt> m = model_with(f);
  for (Parameter* p : m->parameters()) {
    (p->requires_grad() ? t : fz) += p->numel();
    (p->requires_grad() ? st : sf) += (p->numel() + w - 1) / w;
  }
  const int64_t n = (t + 2 * w - 1) / (2 * w) * (2 * w);
  switch (stage) {
    case 0: return {2 * (t + fz), 2 * t, 12 * t};
    case 1: return {2 * (n + fz), 2 * n, 12 * n / w};
    case 2: return {2 * (n + fz), 2 * n / w, 12 * n / w};
    default: return {2 * (st + sf), 2 * st, 12 * st};
  }
}

TEST_P(FrozenStageTest, GradientAndOptimizerBytesAreTheTrainablePartsOnly) {
  const int stage = GetParam(), w = world().world_size();
  std::map<std::string, Bytes> measured;
  std::map<std::string, int64_t> sent;
  for (const Freeze& f : {kNone, kFront, kBack}) {
    const Bytes base = tracked();
    CpuBackend backend;
    auto engine = initialize(model_with(f), bytes_config(stage, w), backend, &world());
    ASSERT_TRUE(engine.ok()) << engine.status();
    const Bytes want = expected_bytes(stage, f, w);
    CountingRows rows{kModel.seq_len, kModel.vocab_size};
    for (int phase = 0; phase < 2; ++phase) {  // after initialisation, and after a step
      const Bytes now = tracked();
      const std::string what = cat("stage ", stage, ", ", f.name, " frozen, phase ", phase);
      EXPECT_EQ(now.params - base.params, want.params) << what;
      EXPECT_EQ(now.grads - base.grads, want.grads) << what;
      EXPECT_EQ(now.optim - base.optim, want.optim) << what;
      EXPECT_TRUE((*engine)->forward(rows.make(world().rank() * 2, 2)).ok());
      EXPECT_TRUE((*engine)->backward().ok());
      absl::StatusOr<StepResult> r = (*engine)->step();
      EXPECT_TRUE(r.ok()) << r.status();
      if (r.ok()) sent[f.name] = r->comm_bytes;
    }
    measured[f.name] = want;
    // The analytic count (zero-estimate's) agrees where it is exact: one flat
    // group at stages 0-2 (stage 3 pads each parameter, it the whole).
    const TrainableCount count = count_trainable((*engine)->model());
    const ModelStateBytes formula =
        engine_model_state_bytes(count.trainable + count.frozen, count.frozen, w, stage, bytes_config(stage, w));
    if (stage < 3) {
      EXPECT_EQ(static_cast<int64_t>(formula.parameters), want.params) << f.name;
      EXPECT_EQ(static_cast<int64_t>(formula.gradients), want.grads) << f.name;
      EXPECT_EQ(static_cast<int64_t>(formula.optimizer_state), want.optim) << f.name;
    } else {
      EXPECT_EQ(static_cast<int64_t>(formula.optimizer_state), 12 * ((count.trainable + w - 1) / w)) << f.name;
    }
  }
  if (world().rank() == 0) {
    for (const auto& [name, b] : measured) {
      std::printf("W=%d stage %d, %s frozen: params %lld B, grads %lld B, optimizer %lld B; %lld B sent per step\n", w,
                  stage, name.c_str(), static_cast<long long>(b.params), static_cast<long long>(b.grads),
                  static_cast<long long>(b.optim), static_cast<long long>(sent[name]));
    }
  }
  if (w == 1) return;
  for (const Freeze& f : {kFront, kBack}) {
    int64_t t = 0;
    int64_t frozen_reduce_scatter = 0;  // bytes stage 3 would send reducing the frozen gradients
    const std::unique_ptr<Gpt> m = model_with(f);
    for (Parameter* p : m->parameters()) {
      if (p->requires_grad()) t += p->numel();
      else frozen_reduce_scatter += (w - 1) * ((p->numel() + w - 1) / w) * 2;
    }
    if (stage < 3) {
      // An all-reduce of the trainable flat group (stages 1-2: its reduce-scatter and all-gather).
      const double n = static_cast<double>((t + 2 * w - 1) / (2 * w) * (2 * w));
      const double all_reduce = 2.0 * n * (w - 1) / w * 2;
      EXPECT_NEAR(static_cast<double>(sent[f.name]) / all_reduce, 1.0, 0.01) << "stage " << stage << ", " << f.name;
    } else {
      // The same gathers, and no reduce-scatter for a frozen parameter.
      EXPECT_EQ(sent["none"] - sent[f.name], frozen_reduce_scatter) << f.name;
    }
  }
}

// ---- (e): checkpoints

std::string fresh_checkpoint_dir(const std::string& name) {
  const std::string dir = (std::filesystem::current_path() / cat(name, ".ckpt.np", world().world_size())).string();
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  EXPECT_TRUE(world().barrier().ok());
  return dir;
}

class FrozenCheckpointTest : public ::testing::TestWithParam<Case> {};

TEST_P(FrozenCheckpointTest, ResumeIsBitwiseAndHoldsNoOptimizerStateForFrozenParameters) {
  const Case c = GetParam();
#ifndef ZE_HAVE_NVME_OFFLOAD
  if (c.offload == Offload::kNvme) GTEST_SKIP() << "this build has no NVMe offload";
#endif
  const EngineConfig ec = config(c, world().world_size());
  const std::string dir = fresh_checkpoint_dir(cat("frozen_params_test.", case_name(c)));
  const std::set<std::string> frozen = frozen_names(kFront);
  constexpr int kHalf = 4;
  CpuBackend backend;
  RunResult first, second;
  std::map<std::string, std::vector<float>> unfrozen_weights;
  {
    auto e = initialize(model_with(kFront), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    run_steps(**e, 0, kHalf, first, false);
    ASSERT_TRUE(save_checkpoint(**e, {dir, "mid", 0}).ok());
    run_steps(**e, kHalf, 2 * kHalf, first, false);
    first.final_weights = weights(**e);
    first.master = masters(**e);
  }
  {
    auto e = initialize(model_with(kFront), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    const absl::Status loaded = load_checkpoint(**e, dir, "mid");
    ASSERT_TRUE(loaded.ok()) << loaded;
    run_steps(**e, kHalf, 2 * kHalf, second, false);
    second.final_weights = weights(**e);
    second.master = masters(**e);
  }
  EXPECT_EQ(second.losses, std::vector<double>(first.losses.begin() + kHalf, first.losses.end()));
  EXPECT_EQ(second.final_weights, first.final_weights);
  EXPECT_EQ(second.master, first.master);

  const absl::StatusOr<Manifest> m = read_manifest(dir, "mid");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(std::set<std::string>(m->frozen.begin(), m->frozen.end()), frozen);
  for (const std::string& name : frozen) {
    EXPECT_EQ(m->tensors.count(Manifest::key("master", name)), 1u) << name << ": its weights are saved";
    for (const std::string& state : m->optimizer_states)
      EXPECT_EQ(m->tensors.count(Manifest::key(state, name)), 0u) << name << ": no " << state;
  }

  // Exported (zero-ckpt consolidate), the frozen weights are there too, and
  // load back into a frozen run (--init-from) as they were.
  const std::string file = cat(dir, "/mid.safetensors");
  if (world().rank() == 0) {
    const absl::Status exported = consolidate_to_safetensors(dir, "mid", file, DType::kF32);
    EXPECT_TRUE(exported.ok()) << exported;
  }
  ASSERT_TRUE(world().barrier().ok());
  std::map<std::string, std::vector<float>> at_mid;
  {
    auto e = initialize(model_with(kFront), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE(load_checkpoint(**e, dir, "mid").ok());
    at_mid = weights(**e);
  }
  {
    auto e = initialize(model_with(kFront), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    const absl::Status loaded = load_safetensors_weights(**e, file);
    ASSERT_TRUE(loaded.ok()) << loaded;
    EXPECT_EQ(weights(**e), at_mid);
  }

  // A run that trains what the checkpoint had frozen cannot resume it.
  {
    auto e = initialize(model_with(kNone), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    const absl::Status loaded = load_checkpoint(**e, dir, "mid");
    EXPECT_EQ(loaded.code(), absl::StatusCode::kFailedPrecondition) << loaded;
    EXPECT_NE(loaded.message().find("it was frozen in the run that saved it"), std::string::npos) << loaded;
  }
  // Freezing what an earlier run trained: its weights are that run's.
  {
    auto e = initialize(model_with(kNone), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    RunResult r;
    run_steps(**e, 0, 2, r, false);
    ASSERT_TRUE(save_checkpoint(**e, {dir, "unfrozen", 0}).ok());
    unfrozen_weights = weights(**e);
  }
  {
    auto e = initialize(model_with(kFront), ec, backend, &world());
    ASSERT_TRUE(e.ok()) << e.status();
    const absl::Status loaded = load_checkpoint(**e, dir, "unfrozen");
    ASSERT_TRUE(loaded.ok()) << loaded;
    EXPECT_EQ(weights(**e), unfrozen_weights);
    RunResult r;
    run_steps(**e, 2, 3, r, false);
    const std::map<std::string, std::vector<float>> after = weights(**e);
    for (const std::string& name : frozen) EXPECT_EQ(after.at(name), unfrozen_weights.at(name)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllStages, FrozenCheckpointTest,
                         ::testing::Values(Case{0}, Case{1}, Case{2}, Case{3}, Case{3, Offload::kCpu},
                                           Case{3, Offload::kNvme}, Case{1, Offload::kNone, DType::kBF16},
                                           Case{3, Offload::kNone, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---- tensor and pipeline parallelism

// On 2 ranks: a tensor group of 2 (stages 1 and 3 over a data group of 1)
// and 2 pipeline stages (stage 1), each freeze against one rank's reference
// (with activation checkpointing: every block its own segment). Split frozen
// parameters are sliced and gathered like trained ones; the tied table's
// copies on the first and last stage skip their sum when frozen ("table").
// "front" at 2 stages leaves stage 0 nothing to train: refused on every
// rank, naming the stage.
TEST(FrozenMeshTest, TensorAndPipelineParallelMatchOneRank) {
  if (world().world_size() != 2) GTEST_SKIP() << "a mesh of 2 tensor or 2 pipeline ranks";
  struct Layout {
    int tensor, pipeline, stage;
  };
  for (const Layout& l : {Layout{2, 1, 1}, Layout{2, 1, 3}, Layout{1, 2, 1}}) {
    for (const Freeze& f : {kFront, kBack, kTable}) {
      const std::string what = cat("T=", l.tensor, " P=", l.pipeline, " stage ", l.stage, ", ", f.name, " frozen");
      std::unique_ptr<DeviceMesh> mesh = DeviceMesh::create(world(), l.tensor, l.pipeline).value();
      const PipelineStage stage =
          gpt_pipeline_stage(kModel, mesh->coordinates().pipeline, l.pipeline, PartitionMethod::kUniform).value();
      auto model = std::make_unique<Gpt>(kModel, &mesh->tensor(), false, stage);
      ASSERT_TRUE(freeze_matching(*model, f.patterns, UnmatchedPattern::kAllow).ok());
      EngineConfig ec = config({l.stage}, 1);
      ec.activation_checkpointing.number_checkpoints = l.pipeline == 1 ? 2 : 1;
      ec.pipeline.stages = l.pipeline;
      ec.gradient_accumulation_steps = l.pipeline;  // 2 micro-batches of 6 through 2 stages
      ec.micro_batch_size = kGlobalBatch / l.pipeline;
      CpuBackend backend;
      absl::StatusOr<std::unique_ptr<Engine>> e = Engine::create(std::move(model), ec, backend, *mesh);
      if (l.pipeline == 2 && f.name == "front") {
        ASSERT_FALSE(e.ok()) << what;
        EXPECT_NE(e.status().message().find("pipeline stage 0 of 2 holds only frozen parameters"), std::string::npos)
            << e.status();
        continue;
      }
      ASSERT_TRUE(e.ok()) << what << ": " << e.status();
      Engine& engine = **e;
      CountingRows rows{kModel.seq_len, kModel.vocab_size};
      std::vector<double> losses, norms;
      for (int step = 0; step < kSteps; ++step) {
        const absl::StatusOr<StepResult> r = engine.train_batch([&](int micro) -> absl::StatusOr<Batch> {
          return rows.make((int64_t{step} * l.pipeline + micro) * ec.micro_batch_size, ec.micro_batch_size);
        });
        ASSERT_TRUE(r.ok()) << what << ": " << r.status();
        losses.push_back(r->loss);
        norms.push_back(r->grad_norm);
      }
      const RunResult& ref = reference(f);
      for (int s = 0; s < kSteps; ++s) {
        EXPECT_NEAR(losses[s], ref.losses[s], 1e-5 * ref.losses[s]) << what << " step " << s + 1;
        EXPECT_NEAR(norms[s], ref.norms[s], (s == 0 ? 1e-6 : 5e-5) * ref.norms[s]) << what << " step " << s + 1;
      }
      const std::set<std::string> frozen = frozen_names(f);
      std::map<std::string, std::vector<float>> trained, trained_ref;
      for (const auto& [name, v] : testing::full_master_weights(engine, mesh->tensor())) {
        if (frozen.count(name) > 0) {
          EXPECT_EQ(v, ref.initial.at(name)) << what << ": frozen " << name << " changed";
        } else {
          trained[name] = v;
          trained_ref[name] = ref.master.at(name);
        }
      }
      testing::expect_same_weights(trained, trained_ref, what);
    }
  }
}

// ---- (f): the planner

TEST(FrozenPlanTest, PlanEqualsMeasuredPeaks) {
  for (const Case& c : {Case{0}, Case{1}, Case{2}, Case{3}, Case{3, Offload::kCpu}}) {
    PlanInput in;
    in.model = kModel;
    in.micro_batch = kGlobalBatch / world().world_size();
    in.engine = config(c, world().world_size());
    in.engine.param_dtype = DType::kBF16;
    in.engine.optimizer = OptimizerConfig{};  // AdamW: two states
    in.world = world().world_size();
    in.rank = world().rank();
    in.freeze = kFront.patterns;
    const absl::StatusOr<MemoryPlan> plan = plan_memory(in);
    ASSERT_TRUE(plan.ok()) << plan.status();

    MemoryTracker::global().reset_peaks();
    const MemorySnapshot before = MemoryTracker::global().snapshot();
    int64_t trainable = 0;
    {
      CpuBackend backend;
      auto e = initialize(model_with(kFront), in.engine, backend, &world());
      ASSERT_TRUE(e.ok()) << e.status();
      trainable = (*e)->num_trainable_parameters();
      RunResult r;
      run_steps(**e, 0, in.optimizer_steps, r, false);
    }
    const MemorySnapshot after = MemoryTracker::global().snapshot();
    const std::string what = cat(case_name(c), " (rank ", in.rank, " of ", in.world, ")");
    EXPECT_EQ(plan->trainable_parameters, trainable) << what;
    EXPECT_LT(plan->trainable_parameters, plan->num_parameters) << what;
    for (int t = 0; t < kNumTiers; ++t) {
      for (int ci = 0; ci < kNumMemCategories; ++ci) {
        EXPECT_EQ(after.by_category[t][ci].peak - before.by_category[t][ci].current, plan->peak[t][ci])
            << what << ": " << tier_name(static_cast<Tier>(t)) << " "
            << mem_category_name(static_cast<MemCategory>(ci));
      }
      EXPECT_EQ(after.allocated[t].peak - before.allocated[t].current, plan->total_peak[t]) << what << ": total";
    }
  }
  // A typo'd pattern is the planner's error too.
  PlanInput in;
  in.model = kModel;
  in.world = world().world_size();
  in.rank = world().rank();
  in.freeze = {"h\\.9\\..*"};
  const absl::StatusOr<MemoryPlan> plan = plan_memory(in);
  EXPECT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("matches no parameter"), std::string::npos) << plan.status();
}

}  // namespace
}  // namespace zero
