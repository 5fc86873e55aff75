// Megatron's tensor-parallel Linear pair (graph/parallel_layers.h) over a
// tensor group of every rank (1-4 under mpirun) computes what the unsplit
// pair computes on one rank: an MLP of a column-parallel Linear (6 -> 12)
// and a row-parallel one (12 -> 5), with biases, against two plain Linears
// built with the same names. Each rank's slices start as the matching
// slices of the unsplit weights (the initial values follow the element's
// place in the unsplit tensor); the output, the input gradient and every
// parameter gradient (the slices' against the matching slices, the
// replicated bias's whole) agree within fp32 rounding of the partial sums.
//
// The vocabulary-parallel embedding, tied head and cross-entropy
// (graph/vocab_parallel.h) against the unsplit Embedding, TiedLMHead and the
// fused cross_entropy kernel, with a vocabulary of 37 that divides by none
// of 2, 3, 4 (the first 37 mod T ranks hold one row more; nothing padded).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "graph/init.h"
#include "graph/layers.h"
#include "graph/parallel_layers.h"
#include "graph/vocab_parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

constexpr int64_t kIn = 6, kHidden = 12, kOut = 5;
constexpr uint64_t kSeed = 7;

// Parameters in memory: weights from their initialisation, biases from a
// ramp over their unsplit elements (so a bias counted twice or misplaced
// shows), gradients zero.
void materialise(Module& m, Backend& backend) {
  for (Parameter* p : m.parameters()) {
    std::vector<float> v(static_cast<size_t>(p->numel()));
    if (p->shape().size() == 1) {
      for (int64_t i = 0; i < p->numel(); ++i) v[i] = 0.05f * static_cast<float>(p->global_index(i) + 1);
    } else {
      init_parameter_values(*p, kSeed, 0, p->numel(), v.data());
    }
    p->data = backend.empty(p->shape(), DType::kF32, MemCategory::kParameters);
    upload_fp32(backend, v, p->data);
    p->grad = backend.zeros(p->shape(), DType::kF32, MemCategory::kGradients);
  }
}

std::vector<float> host(Backend& backend, const Tensor& t) { return download_fp32(backend, t); }

// Elements of `full` (row-major, global shape) that `p`'s slice holds, in its order.
std::vector<float> slice_of(const Parameter& p, const std::vector<float>& full) {
  std::vector<float> out(static_cast<size_t>(p.numel()));
  for (int64_t i = 0; i < p.numel(); ++i) out[i] = full.at(static_cast<size_t>(p.global_index(i)));
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << what << " element " << i;
  }
}

TEST(ParallelLayersTest, GlobalIndexPlacesASliceInTheUnsplitTensor) {
  Parameter rows("w", {2, 3}, ParamInit::zeros());  // rows 4, 5 of a [6, 3]
  rows.set_slice({{6, 3}, 0, 4});
  EXPECT_EQ(rows.global_index(0), 12);
  EXPECT_EQ(rows.global_index(5), 17);
  Parameter cols("w", {3, 2}, ParamInit::zeros());  // columns 2, 3 of a [3, 4]
  cols.set_slice({{3, 4}, 1, 2});
  EXPECT_EQ(cols.global_index(0), 2);
  EXPECT_EQ(cols.global_index(1), 3);
  EXPECT_EQ(cols.global_index(2), 6);
  EXPECT_EQ(cols.global_index(5), 11);
  Parameter whole("b", {4}, ParamInit::zeros());
  EXPECT_EQ(whole.global_index(3), 3);
  // Attention's fused QKV over 2 ranks: rank 1 holds rows 2-3 of each of
  // the three 4-row blocks (q, k, v) of a [12, 2].
  Parameter qkv("w", {6, 2}, ParamInit::zeros());
  qkv.set_slice({{12, 2}, 0, 2, 3});
  EXPECT_EQ(qkv.global_index(0), 4);    // row 2 (q)
  EXPECT_EQ(qkv.global_index(3), 7);    // row 3
  EXPECT_EQ(qkv.global_index(4), 12);   // row 6 (k)
  EXPECT_EQ(qkv.global_index(11), 23);  // row 11 (v)
  // local_index inverts global_index, and is -1 outside the slice.
  for (const Parameter* p : {&rows, &cols, &whole, &qkv}) {
    int64_t inside = 0;
    for (int64_t g = 0; g < shape_numel(p->global_shape()); ++g) {
      const int64_t l = p->local_index(g);
      if (l < 0) continue;
      ++inside;
      EXPECT_EQ(p->global_index(l), g) << p->name() << " element " << g;
    }
    EXPECT_EQ(inside, p->numel()) << p->name();
  }
  // The runs a checkpoint writes: [1, 11) of the QKV slice is rows 2-3 of q
  // from element 1, rows 6-7 of k, rows 10-11 of v up to element 10.
  std::vector<std::array<int64_t, 3>> runs;
  qkv.for_each_global_run(1, 11, [&](int64_t l, int64_t g, int64_t n) { runs.push_back({l, g, n}); });
  const std::vector<std::array<int64_t, 3>> want{{1, 5, 3}, {4, 12, 4}, {8, 20, 3}};
  EXPECT_EQ(runs, want);
  runs.clear();
  cols.for_each_global_run(0, 6, [&](int64_t l, int64_t g, int64_t n) { runs.push_back({l, g, n}); });
  EXPECT_EQ(runs, (std::vector<std::array<int64_t, 3>>{{0, 2, 2}, {2, 6, 2}, {4, 10, 2}}));
}

// Grouped-query attention's fused [q; k; v] as uneven blocks: q 4 rows, k
// and v 2 each of a [8, 2]; this rank holds q rows 2-3, k row 5 and v row 7.
TEST(ParallelLayersTest, UnevenBlocksPlaceEachRunInTheUnsplitTensor) {
  Parameter qkv("w", {4, 2}, ParamInit::zeros());
  qkv.set_slice({.global_shape = {8, 2}, .dim = 0, .runs = {{2, 2}, {5, 1}, {7, 1}}});
  const std::vector<int64_t> want_global{4, 5, 6, 7, 10, 11, 14, 15};
  for (int64_t i = 0; i < qkv.numel(); ++i) {
    EXPECT_EQ(qkv.global_index(i), want_global[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(qkv.local_index(want_global[static_cast<size_t>(i)]), i) << i;
  }
  int64_t inside = 0;
  for (int64_t g = 0; g < 16; ++g) inside += qkv.local_index(g) >= 0 ? 1 : 0;
  EXPECT_EQ(inside, qkv.numel());
  std::vector<std::array<int64_t, 3>> runs;
  qkv.for_each_global_run(1, 7, [&](int64_t l, int64_t g, int64_t n) { runs.push_back({l, g, n}); });
  EXPECT_EQ(runs, (std::vector<std::array<int64_t, 3>>{{1, 5, 3}, {4, 10, 2}, {6, 14, 1}}));
  // A bias of the same blocks: one element per row.
  Parameter bias("b", {4}, ParamInit::zeros());
  bias.set_slice({.global_shape = {8}, .dim = 0, .runs = {{2, 2}, {5, 1}, {7, 1}}});
  EXPECT_EQ(bias.global_index(2), 5);
  EXPECT_EQ(bias.global_index(3), 7);
}

TEST(ParallelLayersTest, EvenSplitCoversTheVocabularyWithoutPadding) {
  // 37 over 4: 10, 9, 9, 9.
  EXPECT_EQ(even_split(37, 4, 0).offset, 0);
  EXPECT_EQ(even_split(37, 4, 0).size, 10);
  EXPECT_EQ(even_split(37, 4, 1).offset, 10);
  EXPECT_EQ(even_split(37, 4, 3).offset, 28);
  EXPECT_EQ(even_split(37, 4, 3).size, 9);
  EXPECT_EQ(even_split(36, 4, 2).size, 9);
}

// The vocabulary-parallel token table, tied head and loss over the world as
// tensor group against the unsplit ones: the embedding output, the loss of
// every row (an ignored target included), each rank's slice of the logits'
// gradient, the gradient of the input of the head, and the table's gradient
// (the embedding's and the head's parts).
TEST(VocabParallelTest, EmbeddingHeadAndLossEqualTheUnsplitOnes) {
  constexpr int64_t kVocab = 37, kDim = 6, kB = 2, kT = 5, kRows = kB * kT;
  CpuBackend backend;
  Communicator& group = world();
  const int tp = group.world_size();
  VocabParallelEmbedding wte("wte", kVocab, kDim, 0.5f, group);
  VocabParallelLMHead head("lm_head", wte);
  Embedding wte_ref("wte", kVocab, kDim, 0.5f);
  TiedLMHead head_ref("lm_head", wte_ref.weight());
  materialise(wte, backend);
  materialise(wte_ref, backend);
  const SplitRange rows = even_split(kVocab, tp, group.rank());
  ASSERT_EQ(wte.weight()->shape()[0], rows.size);
  EXPECT_EQ(rows.size, kVocab / tp + (group.rank() < kVocab % tp ? 1 : 0));

  std::vector<int32_t> ids(kRows), targets(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    ids[i] = static_cast<int32_t>((i * 11 + 3) % kVocab);
    targets[i] = static_cast<int32_t>((i * 7 + 5) % kVocab);
  }
  targets[4] = -1;  // an ignored position
  const Tensor id_t = Tensor::wrap(ids.data(), {kB, kT}, DType::kI32, Tier::kHost);
  const Tensor target_t = Tensor::wrap(targets.data(), {kRows}, DType::kI32, Tier::kHost);

  Context ctx(backend, DType::kF32), ref(backend, DType::kF32);
  const Tensor e = ctx.forward(wte, id_t), e_ref = ref.forward(wte_ref, id_t);
  ASSERT_TRUE(ctx.take_status().ok());
  expect_near(host(backend, e), host(backend, e_ref), "embedding output");
  // Through the tied heads: this rank's logit columns, and the whole ones.
  const Tensor logits = ctx.forward(head, e), logits_ref = ref.forward(head_ref, e_ref);
  ASSERT_EQ(logits.dim(-1), rows.size);

  const float grad_scale = 0.25f;
  Tensor losses = backend.empty({kRows}, DType::kF32, MemCategory::kActivations);
  Tensor losses_ref = backend.empty({kRows}, DType::kF32, MemCategory::kActivations);
  ASSERT_TRUE(vocab_parallel_cross_entropy(backend, group, logits.view({kRows, rows.size}), target_t, rows.offset,
                                           grad_scale, losses)
                  .ok());
  backend.ops().cross_entropy(logits_ref.view({kRows, kVocab}), target_t, grad_scale, losses_ref);
  expect_near(host(backend, losses), host(backend, losses_ref), "losses");
  EXPECT_EQ(host(backend, losses)[4], 0.0f) << "an ignored target has no loss";
  EXPECT_GT(host(backend, losses)[0], 0.0f);
  // This rank's columns of the reference gradient.
  const std::vector<float> dlogits_ref = host(backend, logits_ref);
  std::vector<float> want;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t j = 0; j < rows.size; ++j) want.push_back(dlogits_ref[r * kVocab + rows.offset + j]);
  expect_near(host(backend, logits), want, "the slice of dlogits");

  const Tensor dx = ctx.backward(head, logits), dx_ref = ref.backward(head_ref, logits_ref);
  ASSERT_TRUE(ctx.take_status().ok());
  expect_near(host(backend, dx), host(backend, dx_ref), "dx of the head (all-reduced)");
  ctx.backward(wte, dx);
  ref.backward(wte_ref, dx_ref);
  ASSERT_TRUE(ctx.take_status().ok());
  expect_near(host(backend, wte.weight()->grad), slice_of(*wte.weight(), host(backend, wte_ref.weight()->grad)),
              "table gradient (embedding and head)");
}

TEST(ParallelLayersTest, ColumnThenRowEqualsTheUnsplitPair) {
  CpuBackend backend;
  Communicator& group = world();
  Sequential split("mlp");
  auto* fc = split.add<ColumnParallelLinear>("fc", kIn, kHidden, true, 0.5f, group);
  auto* proj = split.add<RowParallelLinear>("proj", kHidden, kOut, true, 0.5f, group);
  Sequential whole("mlp");
  auto* fc_ref = whole.add<Linear>("fc", kIn, kHidden, true, 0.5f);
  auto* proj_ref = whole.add<Linear>("proj", kHidden, kOut, true, 0.5f);
  materialise(split, backend);
  materialise(whole, backend);
  ASSERT_EQ(fc->local_out(), kHidden / group.world_size());
  // The slices start as the unsplit weights' slices.
  expect_near(host(backend, fc->weight()->data),
              slice_of(*fc->weight(), host(backend, fc_ref->weight()->data)), "initial fc.weight");
  expect_near(host(backend, proj->weight()->data),
              slice_of(*proj->weight(), host(backend, proj_ref->weight()->data)), "initial proj.weight");

  // The same input and output gradient on every rank.
  std::vector<float> xs(2 * 3 * kIn), dys(2 * 3 * kOut);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < dys.size(); ++i) dys[i] = std::cos(0.3f * static_cast<float>(i));
  const Tensor x = Tensor::wrap(xs.data(), {2, 3, kIn}, DType::kF32, Tier::kHost);
  const Tensor dy = Tensor::wrap(dys.data(), {2, 3, kOut}, DType::kF32, Tier::kHost);

  Context ctx(backend, DType::kF32), ref(backend, DType::kF32);
  const Tensor y = ctx.forward(split, x), y_ref = ref.forward(whole, x);
  expect_near(host(backend, y), host(backend, y_ref), "y");
  const Tensor dx = ctx.backward(split, dy), dx_ref = ref.backward(whole, dy);
  ASSERT_TRUE(ctx.take_status().ok());
  expect_near(host(backend, dx), host(backend, dx_ref), "dx");
  expect_near(host(backend, fc->weight()->grad), slice_of(*fc->weight(), host(backend, fc_ref->weight()->grad)),
              "fc.weight grad");
  expect_near(host(backend, fc->bias()->grad), slice_of(*fc->bias(), host(backend, fc_ref->bias()->grad)),
              "fc.bias grad");
  expect_near(host(backend, proj->weight()->grad),
              slice_of(*proj->weight(), host(backend, proj_ref->weight()->grad)), "proj.weight grad");
  expect_near(host(backend, proj->bias()->grad), host(backend, proj_ref->bias()->grad), "proj.bias grad");
}

}  // namespace
}  // namespace zero
