// The stage-3 trace (zero/gather_trace.h) on its own, with a tiny module tree
// and hand-made partitions, checked against hand-computed decisions:
//  * the first iteration records the order modules run in (forward and
//    backward); the trace is complete only from the next begin_iteration(),
//    and an iteration with nothing recorded completes nothing;
//  * later iterations that follow the trace keep it; a step that breaks it
//    (another module, forward vs backward, a step past the end) makes
//    record() return false, stops prefetching and reuse, and the next
//    iteration records the new order, which then becomes the trace;
//  * prefetch() lists, from the current position in trace order, the
//    parameters that are neither persistent nor held, each once (a tied
//    parameter too), until `budget` gathered elements are reached;
//  * reused_soon() says whether a parameter is used again before more than
//    max_reuse_distance elements are gathered by the modules in between;
//  * gather_elements() is world x chunk over a module's non-persistent
//    parameters (so a parameter padded to a multiple of world counts padded).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tests/testing/leaf_module.h"
#include "zero/gather_trace.h"

namespace zero {
namespace {

using testing::Leaf;

// root -> a (a.w: 10, a.b: 3 persistent), b (b.w: 7), c (c.w: 6, and a.w tied),
// partitioned over 2 ranks: chunks a.w 5, a.b 2, b.w 4 (7 padded to 8), c.w 3.
// Elements a gather materialises: a 10 (a.b is persistent), b 8, c 6 + 10 = 16.
// One iteration runs a, b, c forward then c, b, a backward; the elements
// gathered before each step of it are 0, 10, 18, 34, 50, 58 (68 in all).
struct Model {
  static constexpr int kWorld = 2;
  Leaf root{""};
  Leaf* a = root.add_child<Leaf>("a");
  Leaf* b = root.add_child<Leaf>("b");
  Leaf* c = root.add_child<Leaf>("c");
  Parameter* aw = a->own("w", {2, 5});
  Parameter* ab = a->own("b", {3});
  Parameter* bw = b->own("w", {7});
  Parameter* cw = c->own("w", {3, 2});
  std::unordered_map<const Parameter*, ParamPartition> parts;

  Model() {
    c->tie(aw);
    parts[aw] = {.chunk = 5, .shard_offset = 0};
    parts[ab] = {.chunk = 2, .shard_offset = 5, .persistent = true};
    parts[bw] = {.chunk = 4, .shard_offset = 7};
    parts[cw] = {.chunk = 3, .shard_offset = 11};
  }

  struct Step {
    Module* module;
    bool backward;
  };
  std::vector<Step> iteration() const { return {{a, false}, {b, false}, {c, false}, {c, true}, {b, true}, {a, true}}; }
};

// Records `steps` in order, expecting each to follow the trace (or be recorded).
void run(GatherTrace& trace, const std::vector<Model::Step>& steps) {
  for (const Model::Step& s : steps) EXPECT_TRUE(trace.record(*s.module, s.backward)) << s.module->name();
}

// A trace that recorded one iteration and has run the first `position` steps of the next.
void advance(GatherTrace& trace, const Model& m, size_t position) {
  trace.begin_iteration();
  run(trace, m.iteration());
  trace.begin_iteration();
  ASSERT_TRUE(trace.complete());
  const std::vector<Model::Step> steps = m.iteration();
  run(trace, std::vector<Model::Step>(steps.begin(), steps.begin() + position));
}

ZeroConfig with_reuse_distance(int64_t d) {
  ZeroConfig config;
  config.stage = ZeroStage::k3;
  config.max_reuse_distance = d;
  return config;
}

bool nothing_held(const Parameter*) { return false; }

using Params = std::vector<Parameter*>;

TEST(GatherTraceTest, GatherElementsCountsNonPersistentChunksTimesWorld) {
  Model m;
  const GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  EXPECT_EQ(trace.gather_elements(*m.a), 10);  // a.w 2 x 5; a.b persistent
  EXPECT_EQ(trace.gather_elements(*m.b), 8);   // 7 elements padded to 2 x 4
  EXPECT_EQ(trace.gather_elements(*m.c), 16);  // c.w 2 x 3 and the tied a.w 2 x 5
  EXPECT_EQ(trace.gather_elements(m.root), 0);  // no parameters of its own
}

TEST(GatherTraceTest, GatherElementsOnFourRanks) {
  // The same parameters over 4 ranks: chunks a.w 3 (10 -> 12), b.w 2 (7 -> 8), c.w 2 (6 -> 8).
  Model m;
  std::unordered_map<const Parameter*, ParamPartition> parts = {
      {m.aw, {.chunk = 3}}, {m.ab, {.chunk = 1, .persistent = true}}, {m.bw, {.chunk = 2}}, {m.cw, {.chunk = 2}}};
  const GatherTrace trace(ZeroConfig{}, 4, parts);
  EXPECT_EQ(trace.gather_elements(*m.a), 12);
  EXPECT_EQ(trace.gather_elements(*m.b), 8);
  EXPECT_EQ(trace.gather_elements(*m.c), 20);
}

TEST(GatherTraceTest, TheFirstIterationRecordsAndTheSecondCompletes) {
  Model m;
  GatherTrace trace(with_reuse_distance(1000), Model::kWorld, m.parts);
  EXPECT_FALSE(trace.complete());
  trace.begin_iteration();
  run(trace, m.iteration());
  // Still recording: nothing is prefetched nor kept.
  EXPECT_FALSE(trace.complete());
  EXPECT_TRUE(trace.prefetch(INT64_MAX, nothing_held).empty());
  EXPECT_FALSE(trace.reused_soon(m.aw));
  trace.begin_iteration();
  EXPECT_TRUE(trace.complete());
  run(trace, m.iteration());
  EXPECT_TRUE(trace.complete());
  trace.begin_iteration();  // and it stays complete while the order holds
  EXPECT_TRUE(trace.complete());
  run(trace, m.iteration());
  EXPECT_TRUE(trace.complete());
}

// An evaluation forward between iterations (a forward alone, no backward)
// neither breaks nor re-records the trace, and gathers nothing ahead.
TEST(GatherTraceTest, APausedTraceIgnoresAnEvaluationForward) {
  Model m;
  GatherTrace trace(with_reuse_distance(1000), Model::kWorld, m.parts);
  advance(trace, m, 6);  // a whole iteration followed
  trace.set_paused(true);
  for (Module* mod : {static_cast<Module*>(&m.root), static_cast<Module*>(m.a), static_cast<Module*>(m.b)}) {
    EXPECT_TRUE(trace.record(*mod, false)) << mod->name();
  }
  EXPECT_TRUE(trace.prefetch(INT64_MAX, nothing_held).empty());
  EXPECT_FALSE(trace.reused_soon(m.aw));
  trace.set_paused(false);
  trace.begin_iteration();
  EXPECT_TRUE(trace.complete());
  run(trace, m.iteration());
  EXPECT_TRUE(trace.complete()) << "training after the evaluation follows the trace recorded before it";
}

TEST(GatherTraceTest, AnIterationWithNothingRecordedCompletesNothing) {
  Model m;
  GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  trace.begin_iteration();
  trace.begin_iteration();
  EXPECT_FALSE(trace.complete());
  run(trace, m.iteration());
  trace.begin_iteration();
  EXPECT_TRUE(trace.complete());
}

TEST(GatherTraceTest, AnotherModuleBreaksTheTraceAndTheNextIterationRecordsAgain) {
  Model m;
  GatherTrace trace(with_reuse_distance(1000), Model::kWorld, m.parts);
  trace.begin_iteration();
  run(trace, m.iteration());
  trace.begin_iteration();
  EXPECT_TRUE(trace.record(*m.a, false));
  EXPECT_FALSE(trace.record(*m.c, false));  // the trace expects b
  EXPECT_FALSE(trace.complete());
  EXPECT_TRUE(trace.prefetch(INT64_MAX, nothing_held).empty());
  EXPECT_FALSE(trace.reused_soon(m.aw));
  trace.record(*m.c, true);
  trace.record(*m.a, true);

  // The next iteration records the new order a, c, c', a' ...
  trace.begin_iteration();
  EXPECT_FALSE(trace.complete());
  const std::vector<Model::Step> skip_b = {{m.a, false}, {m.c, false}, {m.c, true}, {m.a, true}};
  run(trace, skip_b);
  // ... which the one after follows: a.w (a.b persistent), c.w (a.w listed already).
  trace.begin_iteration();
  ASSERT_TRUE(trace.complete());
  EXPECT_EQ(trace.prefetch(INT64_MAX, nothing_held), (Params{m.aw, m.cw}));
  run(trace, skip_b);
  EXPECT_TRUE(trace.complete());
  // The old order now breaks it.
  trace.begin_iteration();
  EXPECT_TRUE(trace.record(*m.a, false));
  EXPECT_FALSE(trace.record(*m.b, false));
  EXPECT_FALSE(trace.complete());
}

TEST(GatherTraceTest, BackwardInPlaceOfForwardBreaksTheTrace) {
  Model m;
  GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  trace.begin_iteration();
  run(trace, m.iteration());
  trace.begin_iteration();
  EXPECT_FALSE(trace.record(*m.a, true));  // the trace starts with a's forward
  EXPECT_FALSE(trace.complete());
}

TEST(GatherTraceTest, AStepPastTheEndBreaksTheTrace) {
  Model m;
  GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  trace.begin_iteration();
  run(trace, m.iteration());
  trace.begin_iteration();
  run(trace, m.iteration());
  EXPECT_FALSE(trace.record(*m.a, false));
  EXPECT_FALSE(trace.complete());
}

TEST(GatherTraceTest, PrefetchFollowsTheTraceSkippingPersistentAndRepeats) {
  Model m;
  GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  advance(trace, m, 0);
  // a: a.w (a.b persistent); b: b.w; c: c.w (a.w listed already); the backward steps add nothing new.
  EXPECT_EQ(trace.prefetch(INT64_MAX, nothing_held), (Params{m.aw, m.bw, m.cw}));
}

TEST(GatherTraceTest, PrefetchStartsAtTheCurrentPosition) {
  Model m;
  {
    GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
    advance(trace, m, 1);  // next: b, c, c', b', a'
    EXPECT_EQ(trace.prefetch(INT64_MAX, nothing_held), (Params{m.bw, m.cw, m.aw}));
  }
  {
    GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
    advance(trace, m, 3);  // next: c', b', a'
    EXPECT_EQ(trace.prefetch(INT64_MAX, nothing_held), (Params{m.cw, m.aw, m.bw}));
  }
  {
    GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
    advance(trace, m, 5);  // next: a'
    EXPECT_EQ(trace.prefetch(INT64_MAX, nothing_held), (Params{m.aw}));
  }
  {
    GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
    advance(trace, m, 6);  // the end of the iteration: nothing ahead
    EXPECT_TRUE(trace.prefetch(INT64_MAX, nothing_held).empty());
  }
}

TEST(GatherTraceTest, PrefetchStopsOnceTheBudgetIsReached) {
  // From the start: a.w (10), b.w (8), c.w (6); cumulative 10, 18, 24.
  Model m;
  GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  advance(trace, m, 0);
  EXPECT_TRUE(trace.prefetch(0, nothing_held).empty());
  EXPECT_TRUE(trace.prefetch(-5, nothing_held).empty());  // more live than allowed already
  EXPECT_EQ(trace.prefetch(1, nothing_held), (Params{m.aw}));  // the gather that reaches the budget is issued
  EXPECT_EQ(trace.prefetch(10, nothing_held), (Params{m.aw}));
  EXPECT_EQ(trace.prefetch(11, nothing_held), (Params{m.aw, m.bw}));
  EXPECT_EQ(trace.prefetch(18, nothing_held), (Params{m.aw, m.bw}));
  EXPECT_EQ(trace.prefetch(19, nothing_held), (Params{m.aw, m.bw, m.cw}));
  EXPECT_EQ(trace.prefetch(24, nothing_held), (Params{m.aw, m.bw, m.cw}));
}

TEST(GatherTraceTest, PrefetchSkipsHeldParametersWithoutCountingThem) {
  Model m;
  GatherTrace trace(ZeroConfig{}, Model::kWorld, m.parts);
  advance(trace, m, 0);
  std::unordered_set<const Parameter*> held = {m.aw};
  auto is_held = [&](const Parameter* p) { return held.count(p) > 0; };
  EXPECT_EQ(trace.prefetch(INT64_MAX, is_held), (Params{m.bw, m.cw}));
  EXPECT_EQ(trace.prefetch(8, is_held), (Params{m.bw}));  // a.w costs nothing: b.w alone reaches 8
  EXPECT_EQ(trace.prefetch(9, is_held), (Params{m.bw, m.cw}));
  held = {m.aw, m.bw, m.cw};
  EXPECT_TRUE(trace.prefetch(INT64_MAX, is_held).empty());
}

// reused_soon after the first `position` steps of an iteration, with max_reuse_distance d.
bool reused_soon(const Model& m, size_t position, int64_t d, const Parameter* p) {
  GatherTrace trace(with_reuse_distance(d), Model::kWorld, m.parts);
  advance(trace, m, position);
  return trace.reused_soon(p);
}

TEST(GatherTraceTest, ReusedSoonMeasuresTheElementsGatheredInBetween) {
  Model m;
  // After a: a.w is next used by c, with b's 8 elements in between.
  EXPECT_TRUE(reused_soon(m, 1, 8, m.aw));
  EXPECT_FALSE(reused_soon(m, 1, 7, m.aw));
  // After a, b: b.w is next used by b', with c, c' (16 + 16) in between.
  EXPECT_TRUE(reused_soon(m, 2, 32, m.bw));
  EXPECT_FALSE(reused_soon(m, 2, 31, m.bw));
  // After a, b, c: c' uses c.w and a.w straight away.
  EXPECT_TRUE(reused_soon(m, 3, 0, m.cw));
  EXPECT_TRUE(reused_soon(m, 3, 0, m.aw));
  EXPECT_FALSE(reused_soon(m, 3, 0, m.bw));  // b' comes after c' (16)
  EXPECT_TRUE(reused_soon(m, 3, 16, m.bw));
  // After c': a.w is next used by a', with b' (8) in between; c.w never again.
  EXPECT_TRUE(reused_soon(m, 4, 8, m.aw));
  EXPECT_FALSE(reused_soon(m, 4, 7, m.aw));
  EXPECT_FALSE(reused_soon(m, 4, 1000000, m.cw));
  // A persistent parameter is measured the same way: after a, a.b is next
  // used by a', with b, c, c', b' (8 + 16 + 16 + 8) in between.
  EXPECT_TRUE(reused_soon(m, 1, 48, m.ab));
  EXPECT_FALSE(reused_soon(m, 1, 47, m.ab));
  // At the end of the iteration nothing is used again.
  EXPECT_FALSE(reused_soon(m, 6, 1000000, m.aw));
}

}  // namespace
}  // namespace zero
