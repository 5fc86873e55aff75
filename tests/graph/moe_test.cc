// The sparse MLP (graph/moe.h) on the CPU backend:
//  * its input, router, expert and shared-expert gradients are central
//    differences of its forward (Mixtral's renormalised top-2; Qwen2-MoE's
//    unnormalised top-2 with a shared expert), the auxiliary losses aside;
//  * the router's backward op is the gradient of the weighted top-k weights,
//    the per-expert probability term and the z-loss, by central differences
//    in double;
//  * a capacity drops exactly the choices past it (first choices kept
//    first), and a capacity no expert reaches changes nothing, bit for bit;
//  * the auxiliary losses: transformers' global form couples the layers,
//    Megatron's per-layer form does not, and each gradient is the derivative
//    of its loss;
//  * every expert runs, even one no token chose (the same module calls on
//    every rank: ZeRO's gathers and reductions match).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "graph/context.h"
#include "graph/moe.h"
#include "graph/transformer.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/central_differences.h"

namespace zero {
namespace {

using testing::random_values;
using testing::upload;

BlockConfig moe_block(MoeConfig moe, MoeLosses* losses) {
  BlockConfig c;
  c.features = model_family(ModelArch::kMixtral).features;
  c.d_model = 6;
  c.n_head = 2;
  c.d_ff = 7;
  c.init_std = 0.5f;
  c.moe = moe;
  c.moe_losses = losses;
  return c;
}

MoeConfig small_moe() {
  MoeConfig m;
  m.num_experts = 4;
  m.top_k = 2;
  m.expert_d_ff = 5;
  return m;
}

// dx and every parameter's gradient of sum(r * moe(x)) against central differences.
void check_gradients(const MoeConfig& moe, const std::string& label) {
  CpuBackend backend;
  MoeLosses losses(moe);
  MoeMlp m("mlp", moe_block(moe, &losses), 0);
  testing::materialise_random(m, backend, 21);
  Context ctx(backend, DType::kF32);
  const Shape shape{2, 3, 6};
  const std::vector<float> xv = random_values(36, 3);
  const Tensor y = ctx.forward(m, upload(backend, xv, shape));
  const std::vector<float> r = random_values(static_cast<size_t>(y.numel()), 5);
  const Tensor dx = ctx.backward(m, upload(backend, r, y.shape()));
  ASSERT_TRUE(ctx.take_status().ok());
  ASSERT_EQ(ctx.live_frames(), 0u);
  std::vector<std::vector<float>> grads;
  for (Parameter* p : m.parameters()) grads.push_back(download_fp32(backend, p->grad));
  // h small enough that no token's top-k changes between loss(v + h) and loss(v - h).
  const int64_t checked = testing::expect_central_differences(ctx, m, backend, xv, shape, r, download_fp32(backend, dx),
                                                              grads, label, 1e-3f);
  EXPECT_GT(checked, 300) << label;
  // The router's gradient is not zero: the weights' path reaches it.
  EXPECT_GT(std::accumulate(grads[0].begin(), grads[0].end(), 0.0, [](double a, float g) { return a + std::fabs(g); }),
            1e-3)
      << label;
}

TEST(MoeMlpTest, MixtralGradientsMatchCentralDifferences) { check_gradients(small_moe(), "mixtral"); }

TEST(MoeMlpTest, SharedExpertAndUnnormalisedWeightsMatchCentralDifferences) {
  MoeConfig moe = small_moe();
  moe.norm_topk_prob = false;
  moe.shared_expert_d_ff = 3;
  check_gradients(moe, "qwen2_moe");
}

// L(logits) = sum dweights * w + sum_rows sum_e extra_e p_e + z_scale sum_rows lse^2, in double.
double router_loss(const std::vector<double>& logits, int64_t n, int64_t e, int64_t k, bool renormalize,
                   const std::vector<int32_t>& chosen, const std::vector<float>& dw, const std::vector<float>& extra,
                   double z_scale) {
  double total = 0;
  for (int64_t t = 0; t < n; ++t) {
    double mx = logits[t * e];
    for (int64_t j = 1; j < e; ++j) mx = std::max(mx, logits[t * e + j]);
    double sum = 0;
    for (int64_t j = 0; j < e; ++j) sum += std::exp(logits[t * e + j] - mx);
    const double lse = mx + std::log(sum);
    double picked = 0;
    for (int64_t s = 0; s < k; ++s) picked += std::exp(logits[t * e + chosen[t * k + s]] - lse);
    for (int64_t s = 0; s < k; ++s) {
      const double p = std::exp(logits[t * e + chosen[t * k + s]] - lse);
      total += dw[t * k + s] * (renormalize ? p / picked : p);
    }
    for (int64_t j = 0; j < e; ++j) total += extra[j] * std::exp(logits[t * e + j] - lse);
    total += z_scale * lse * lse;
  }
  return total;
}

TEST(MoeRouterOpTest, BackwardIsTheGradientOfWeightsAuxAndZLoss) {
  CpuBackend backend;
  const int64_t n = 9, e = 5, k = 2;
  for (const bool renormalize : {true, false}) {
    const std::vector<float> lv = random_values(n * e, 7, 0.0f, 1.5f);
    const Tensor logits = upload(backend, lv, {n, e});
    Tensor probs = backend.empty({n, e}, DType::kF32, MemCategory::kActivations);
    Tensor weights = backend.empty({n, k}, DType::kF32, MemCategory::kActivations);
    Tensor lse = backend.empty({n}, DType::kF32, MemCategory::kActivations);
    Tensor indices = backend.empty({n, k}, DType::kI32, MemCategory::kActivations);
    backend.ops().moe_router_forward(logits, k, renormalize, probs, indices, weights, lse);
    std::vector<int32_t> chosen(static_cast<size_t>(n * k));
    backend.copy(chosen.data(), indices.data(), chosen.size() * sizeof(int32_t));
    // The top k, largest first, and their weights.
    const std::vector<float> p = download_fp32(backend, probs), w = download_fp32(backend, weights);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < e; ++j) {
        const bool in = chosen[t * k] == j || chosen[t * k + 1] == j;
        if (!in) {
          EXPECT_LE(p[t * e + j], p[t * e + chosen[t * k + 1]]) << "row " << t;
        }
      }
      EXPECT_GE(p[t * e + chosen[t * k]], p[t * e + chosen[t * k + 1]]);
      const float sum = p[t * e + chosen[t * k]] + p[t * e + chosen[t * k + 1]];
      EXPECT_NEAR(w[t * k], renormalize ? p[t * e + chosen[t * k]] / sum : p[t * e + chosen[t * k]], 1e-6f);
    }
    const std::vector<float> dw = random_values(n * k, 8), extra = random_values(e, 9);
    const double z_scale = 0.3;
    Tensor dlogits = backend.empty({n, e}, DType::kF32, MemCategory::kActivations);
    backend.ops().moe_router_backward(probs, indices, upload(backend, dw, {n, k}), renormalize,
                                      upload(backend, extra, {e}), static_cast<float>(z_scale), lse, dlogits);
    const std::vector<float> analytic = download_fp32(backend, dlogits);
    std::vector<double> l(lv.begin(), lv.end());
    for (int64_t i = 0; i < n * e; ++i) {
      const double h = 1e-5, keep = l[i];
      l[i] = keep + h;
      const double plus = router_loss(l, n, e, k, renormalize, chosen, dw, extra, z_scale);
      l[i] = keep - h;
      const double minus = router_loss(l, n, e, k, renormalize, chosen, dw, extra, z_scale);
      l[i] = keep;
      EXPECT_NEAR(analytic[i], (plus - minus) / (2 * h), 1e-5) << "dlogits[" << i << "]"
                                                                << (renormalize ? " renormalised" : "");
    }
  }
}

// Routes `tokens` rows through a fresh layer (same seed each time) and
// returns its output; `losses` gets the routing.
std::vector<float> route(const MoeConfig& moe, MoeLosses& losses, const std::vector<float>& x, int64_t tokens) {
  CpuBackend backend;
  MoeMlp m("mlp", moe_block(moe, &losses), 3);
  testing::materialise_random(m, backend, 31);
  Context ctx(backend, DType::kF32);
  const std::vector<float> y = download_fp32(backend, ctx.forward(m, upload(backend, x, {tokens, 6})));
  ctx.clear();
  return y;
}

TEST(MoeMlpTest, CapacityDropsTheChoicesPastItAndNothingBelowIt) {
  const int64_t tokens = 40;
  const std::vector<float> x = random_values(tokens * 6, 13);
  MoeConfig dropless = small_moe();
  MoeLosses a(dropless);
  const std::vector<float> y_dropless = route(dropless, a, x, tokens);
  a.finish(1.0);
  ASSERT_EQ(a.last_choices().size(), 1u);
  const std::vector<double> choices = a.last_choices()[0].second;
  EXPECT_EQ(std::accumulate(choices.begin(), choices.end(), 0.0), static_cast<double>(tokens * 2));
  EXPECT_EQ(a.last_dropped(), 0);

  // capacity_factor 0.5: max(min_capacity 4, ceil(2 x 40 / 4 x 0.5)) = 10 per expert.
  MoeConfig bounded = dropless;
  bounded.capacity_factor = 0.5;
  ASSERT_EQ(bounded.capacity(tokens), 10);
  int64_t expect_dropped = 0;
  for (double c : choices) expect_dropped += std::max<int64_t>(0, static_cast<int64_t>(c) - 10);
  ASSERT_GT(expect_dropped, 0) << "the test needs an expert chosen more than 10 times";
  MoeLosses b(bounded);
  const std::vector<float> y_bounded = route(bounded, b, x, tokens);
  b.finish(1.0);
  EXPECT_EQ(b.last_dropped(), expect_dropped);
  EXPECT_EQ(b.last_choices()[0].second, choices);  // the loss counts choices, kept or not
  int64_t rows_changed = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    bool changed = false;
    for (int64_t j = 0; j < 6; ++j) changed = changed || y_bounded[t * 6 + j] != y_dropless[t * 6 + j];
    rows_changed += changed;
  }
  EXPECT_GT(rows_changed, 0);
  EXPECT_LE(rows_changed, expect_dropped);  // a token changes only when one of its choices was dropped

  // A capacity no expert reaches: the dropless output, bit for bit.
  MoeConfig roomy = dropless;
  roomy.capacity_factor = 100.0;
  MoeLosses c(roomy);
  EXPECT_EQ(route(roomy, c, x, tokens), y_dropless);
}

TEST(MoeLossesTest, GlobalCouplesTheLayersAndPerLayerDoesNot) {
  MoeConfig moe = small_moe();
  moe.aux_loss_coef = 0.5f;
  moe.z_loss_coef = 0.25f;
  // Two layers of 10 rows, 2 choices each: layer 0 favours expert 0, layer 1 expert 3.
  const std::vector<double> c0{10, 6, 3, 1}, c1{2, 3, 5, 10}, p0{4, 3, 2, 1}, p1{1, 2, 3, 4};
  for (const AuxLossScope scope : {AuxLossScope::kGlobal, AuxLossScope::kPerLayer}) {
    moe.aux_loss_scope = scope;
    MoeLosses l(moe);
    const auto r0 = l.add(nullptr, 0, c0, p0, 10, 30.0);
    const auto r1 = l.add(nullptr, 1, c1, p1, 10, 50.0);
    const double weighted = l.finish(2.0);
    double aux = 0;
    if (scope == AuxLossScope::kGlobal) {  // E sum_e (C_e / R)(P_e / R), R = 20
      for (int e = 0; e < 4; ++e) aux += 4 * ((c0[e] + c1[e]) / 20) * ((p0[e] + p1[e]) / 20);
    } else {
      for (int e = 0; e < 4; ++e) aux += 4 * (c0[e] / 10) * (p0[e] / 10) + 4 * (c1[e] / 10) * (p1[e] / 10);
    }
    const double z = 30.0 / 10 + 50.0 / 10;
    EXPECT_NEAR(l.last_aux_loss(), aux, 1e-12);
    EXPECT_NEAR(l.last_z_loss(), z, 1e-12);
    EXPECT_NEAR(weighted, 0.5 * aux + 0.25 * z, 1e-12);
    // d(coef aux)/d p[n, e] of layer 0, times the gradient scale 2.
    const std::vector<float>& g0 = r0->prob_gradient;
    ASSERT_EQ(g0.size(), 4u);
    for (int e = 0; e < 4; ++e) {
      const double want = scope == AuxLossScope::kGlobal ? 2.0 * 0.5 * 4 * (c0[e] + c1[e]) / (20.0 * 20.0)
                                                         : 2.0 * 0.5 * 4 * c0[e] / (10.0 * 10.0);
      EXPECT_NEAR(g0[e], want, 1e-6) << "expert " << e;
    }
    EXPECT_FLOAT_EQ(r1->z_scale, static_cast<float>(2.0 * 0.25 / 10));
    EXPECT_EQ(l.find(nullptr, 1), r1);  // what a recompute of layer 1 reads
    // The next micro-batch starts afresh.
    EXPECT_EQ(l.finish(1.0), 0.0);
  }
}

TEST(MoeMlpTest, EveryExpertRunsEvenWhenNoTokenChoseIt) {
  CpuBackend backend;
  MoeConfig moe = small_moe();
  moe.num_experts = 8;
  MoeLosses losses(moe);
  MoeMlp m("mlp", moe_block(moe, &losses), 0);
  testing::materialise_random(m, backend, 41);
  // Counting module calls: one token, two choices, so at least 6 of 8 experts go unchosen.
  struct Calls : ModuleHooks {
    std::vector<std::string> forward, backward;
    absl::Status pre_forward(Module& mod) override { return forward.push_back(mod.name()), absl::OkStatus(); }
    absl::Status pre_backward(Module& mod) override { return backward.push_back(mod.name()), absl::OkStatus(); }
  } calls;
  Context ctx(backend, DType::kF32);
  ctx.set_hooks(&calls);
  const Tensor y = ctx.forward(m, upload(backend, random_values(6, 2), {1, 6}));
  ctx.backward(m, upload(backend, random_values(6, 3), y.shape()));
  ASSERT_TRUE(ctx.take_status().ok());
  for (int e = 0; e < 8; ++e) {
    const std::string expert = "mlp.experts." + std::to_string(e);
    EXPECT_EQ(std::count(calls.forward.begin(), calls.forward.end(), expert), 1) << expert;
    EXPECT_EQ(std::count(calls.backward.begin(), calls.backward.end(), expert), 1) << expert;
  }
  // An unchosen expert's weights get exact zeros.
  losses.finish(1.0);
  const std::vector<double>& choices = losses.last_choices()[0].second;
  int zero_experts = 0;
  for (int e = 0; e < 8; ++e) {
    if (choices[e] > 0) continue;
    for (Parameter* p : m.parameters()) {
      if (p->name().rfind("mlp.experts." + std::to_string(e) + ".", 0) != 0) continue;
      for (float g : download_fp32(backend, p->grad)) EXPECT_EQ(g, 0.0f) << p->name();
    }
    ++zero_experts;
  }
  EXPECT_GE(zero_experts, 6);
}

}  // namespace
}  // namespace zero
