// The device mesh on 1-4 ranks: the coordinate formulas (Megatron's order:
// tensor fastest, then data, then pipeline), communicator splits whose
// groups reduce only among their members, every mesh layout the world
// divides into, point-to-point send and receive around a ring, and the
// engine refusing the pipeline groups it cannot use yet (tensor groups:
// runtime/tensor_parallel_test.cc).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "comm/device_mesh.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

// Sum over a group of each member's world rank + 1, by all-reduce.
double group_rank_sum(Communicator& group) {
  return group.all_reduce_sum(static_cast<double>(world().rank() + 1)).value();
}

TEST(DeviceMeshTest, CoordinatesFollowMegatronsOrder) {
  const MeshShape s{.data = 2, .tensor = 2, .pipeline = 2};  // 8 ranks
  std::set<std::tuple<int, int, int>> seen;
  for (int r = 0; r < s.world(); ++r) {
    const MeshCoordinates c = mesh_coordinates(s, r);
    EXPECT_EQ(c.tensor, r % 2) << r;
    EXPECT_EQ(c.data, (r / 2) % 2) << r;
    EXPECT_EQ(c.pipeline, r / 4) << r;
    EXPECT_EQ(r, (c.pipeline * s.data + c.data) * s.tensor + c.tensor);
    seen.insert({c.data, c.tensor, c.pipeline});
  }
  EXPECT_EQ(seen.size(), 8u);  // a bijection
}

TEST(DeviceMeshTest, SplitGroupsReduceAmongTheirMembersOnly) {
  const int w = world().world_size(), r = world().rank();
  // Even and odd ranks, each group ranked in reverse world order.
  auto group = world().split(r % 2, -r);
  ASSERT_TRUE(group.ok()) << group.status();
  int members = 0, before_me_in_key_order = 0;
  double want = 0;
  for (int q = 0; q < w; ++q) {
    if (q % 2 != r % 2) continue;
    ++members;
    want += q + 1;
    if (q > r) ++before_me_in_key_order;
  }
  EXPECT_EQ((*group)->world_size(), members);
  EXPECT_EQ((*group)->rank(), before_me_in_key_order);
  EXPECT_EQ(group_rank_sum(**group), want);
  EXPECT_EQ(group_rank_sum(world()), w * (w + 1) / 2.0);  // the world is untouched
}

TEST(DeviceMeshTest, EveryLayoutTheWorldDividesInto) {
  const int w = world().world_size();
  for (int tensor = 1; tensor <= w; ++tensor) {
    for (int pipeline = 1; tensor * pipeline <= w; ++pipeline) {
      if (w % (tensor * pipeline) != 0) continue;
      auto mesh = DeviceMesh::create(world(), tensor, pipeline);
      ASSERT_TRUE(mesh.ok()) << mesh.status();
      const MeshShape& s = (*mesh)->shape();
      const MeshCoordinates c = (*mesh)->coordinates();
      const std::string where = cat("tensor ", tensor, " pipeline ", pipeline);
      EXPECT_EQ(s.data, w / (tensor * pipeline)) << where;
      EXPECT_EQ((*mesh)->data().world_size(), s.data) << where;
      EXPECT_EQ((*mesh)->tensor().world_size(), tensor) << where;
      EXPECT_EQ((*mesh)->pipeline().world_size(), pipeline) << where;
      EXPECT_EQ((*mesh)->data().rank(), c.data) << where;
      EXPECT_EQ((*mesh)->tensor().rank(), c.tensor) << where;
      EXPECT_EQ((*mesh)->pipeline().rank(), c.pipeline) << where;
      // Each group's members by the formulas, and their reduction.
      double data_sum = 0, tensor_sum = 0, pipeline_sum = 0;
      for (int q = 0; q < w; ++q) {
        const MeshCoordinates o = mesh_coordinates(s, q);
        if (o.tensor == c.tensor && o.pipeline == c.pipeline) data_sum += q + 1;
        if (o.data == c.data && o.pipeline == c.pipeline) tensor_sum += q + 1;
        if (o.data == c.data && o.tensor == c.tensor) pipeline_sum += q + 1;
      }
      EXPECT_EQ(group_rank_sum((*mesh)->data()), data_sum) << where;
      EXPECT_EQ(group_rank_sum((*mesh)->tensor()), tensor_sum) << where;
      EXPECT_EQ(group_rank_sum((*mesh)->pipeline()), pipeline_sum) << where;
    }
  }
  EXPECT_EQ(DeviceMesh::create(world(), w + 1).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- named axes (comm/mesh_layout.h)

TEST(MeshLayoutTest, MegatronsOrderStringFirstAxisFastest) {
  absl::StatusOr<MeshLayout> l =
      MeshLayout::create("tp-cp-ep-dp-pp", {{"tp", 2}, {"cp", 3}, {"ep", 1}, {"pp", 2}}, 24);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->describe(), "tp 2 x cp 3 x ep 1 x dp 2 x pp 2");  // dp: what the others leave
  std::set<std::vector<int>> seen;
  for (int r = 0; r < 24; ++r) {
    const int tp = l->coordinate(r, "tp"), cp = l->coordinate(r, "cp"), dp = l->coordinate(r, "dp"),
              pp = l->coordinate(r, "pp");
    EXPECT_EQ(tp, r % 2) << r;
    EXPECT_EQ(cp, (r / 2) % 3) << r;
    EXPECT_EQ(l->coordinate(r, "ep"), 0) << r;
    EXPECT_EQ(dp, (r / 6) % 2) << r;
    EXPECT_EQ(pp, r / 12) << r;
    EXPECT_EQ(l->rank_at({{"tp", tp}, {"cp", cp}, {"dp", dp}, {"pp", pp}}), r);
    seen.insert({tp, cp, dp, pp});
    // A group's color is shared by exactly the ranks equal on the other axes.
    for (int q = 0; q < 24; ++q) {
      const bool same_dp_group = l->coordinate(q, "tp") == tp && l->coordinate(q, "cp") == cp &&
                                 l->coordinate(q, "pp") == pp;
      EXPECT_EQ(l->group_color(q, "dp") == l->group_color(r, "dp"), same_dp_group) << r << " " << q;
    }
  }
  EXPECT_EQ(seen.size(), 24u);  // a bijection
  // Another order moves the ranks: pipeline stages adjacent.
  absl::StatusOr<MeshLayout> pp_first = MeshLayout::create("pp-tp-dp", {{"tp", 2}, {"pp", 2}}, 8);
  ASSERT_TRUE(pp_first.ok()) << pp_first.status();
  EXPECT_EQ(pp_first->coordinate(1, "pp"), 1);
  EXPECT_EQ(pp_first->coordinate(2, "tp"), 1);
  EXPECT_EQ(pp_first->size("ep"), 1) << "an axis the order leaves out";
}

TEST(MeshLayoutTest, ABadOrderOrSizesAreRefusedNamingThem) {
  auto message = [](std::string_view order, std::map<std::string, int> sizes, int world) {
    absl::StatusOr<MeshLayout> l = MeshLayout::create(order, sizes, world);
    EXPECT_FALSE(l.ok()) << order;
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(l.status().message());
  };
  EXPECT_NE(message("tp-xp-dp", {}, 4).find("\"xp\" is not an axis (the axes: tp, cp, ep, dp, pp"), std::string::npos);
  EXPECT_NE(message("tp-dp-tp", {}, 4).find("axis tp is named twice"), std::string::npos);
  EXPECT_NE(message("tp-dp", {{"pp", 2}}, 4).find("has no axis pp (of size 2)"), std::string::npos);
  const std::string sizes = message("tp-dp-pp", {{"tp", 2}, {"dp", 3}, {"pp", 1}}, 8);
  EXPECT_NE(sizes.find("tp 2 x dp 3 x pp 1"), std::string::npos) << sizes;
  EXPECT_NE(sizes.find("is 6 ranks, not the world's 8"), std::string::npos) << sizes;
  EXPECT_NE(message("tp-dp-pp", {{"tp", 3}}, 8).find("the other axes (3 ranks) must divide the world"),
            std::string::npos);
}

TEST(DeviceMeshTest, EveryOrderGivesGroupsOfTheRanksEqualOnTheOtherAxes) {
  const int w = world().world_size(), r = world().rank();
  if (w != 4) GTEST_SKIP() << "4 ranks: tp 2 x dp 2";
  for (const char* order : {"tp-dp-pp", "dp-tp-pp", "tp-cp-ep-dp-pp", "dp-ep-tp"}) {
    absl::StatusOr<MeshLayout> layout = MeshLayout::create(order, {{"tp", 2}}, w);
    ASSERT_TRUE(layout.ok()) << layout.status();
    auto mesh = DeviceMesh::create(world(), *layout);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    for (std::string_view axis : kMeshAxisNames) {
      Communicator& g = (*mesh)->group(axis);
      double want = 0;
      for (int q = 0; q < w; ++q) {
        if (layout->group_color(q, axis) == layout->group_color(r, axis)) want += q + 1;
      }
      EXPECT_EQ(g.world_size(), layout->size(axis)) << order << " " << axis;
      EXPECT_EQ(g.rank(), layout->coordinate(r, axis)) << order << " " << axis;
      EXPECT_EQ(group_rank_sum(g), want) << order << " " << axis;
    }
    EXPECT_EQ((*mesh)->coordinates().tensor, layout->coordinate(r, "tp")) << order;
    EXPECT_EQ((*mesh)->coordinates().data, layout->coordinate(r, "dp")) << order;
    EXPECT_EQ(&(*mesh)->tensor(), &(*mesh)->group("tp"));
  }
}

// Expert parallelism (DeepSpeed-MoE's layout): the dense data group is the
// ep and dp axes together, ranked ep-fastest so that each ep group is
// consecutive data ranks; the expert-data group is the data ranks at the
// same place in their ep groups. The dry run builds the same groups.
TEST(DeviceMeshTest, ExpertGroupsAreConsecutiveDataRanksWhateverTheOrder) {
  const int w = world().world_size(), r = world().rank();
  if (w != 4) GTEST_SKIP() << "4 ranks: ep 2 x dp 2";
  for (const char* order : {"tp-ep-dp-pp", "dp-ep"}) {
    absl::StatusOr<MeshLayout> layout = MeshLayout::create(order, {{"ep", 2}}, w);
    ASSERT_TRUE(layout.ok()) << layout.status();
    auto mesh = DeviceMesh::create(world(), *layout);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    const int e = layout->coordinate(r, "ep"), d = layout->coordinate(r, "dp");
    EXPECT_EQ((*mesh)->shape().data, 4) << order;
    EXPECT_EQ((*mesh)->shape().expert, 2) << order;
    EXPECT_EQ((*mesh)->coordinates().data, d * 2 + e) << order;
    EXPECT_EQ((*mesh)->coordinates().expert, e) << order;
    EXPECT_EQ((*mesh)->data().world_size(), 4) << order;
    EXPECT_EQ((*mesh)->data().rank(), d * 2 + e) << order;
    EXPECT_EQ((*mesh)->expert().world_size(), 2) << order;
    EXPECT_EQ((*mesh)->expert().rank(), e) << order;
    EXPECT_EQ((*mesh)->expert_data().world_size(), 2) << order;
    EXPECT_EQ((*mesh)->expert_data().rank(), d) << order;
    // The members, by their world ranks: the ep group's share d, the expert-data group's e.
    double ep_members = 0, edp_members = 0;
    for (int q = 0; q < w; ++q) {
      if (layout->coordinate(q, "dp") == d) ep_members += q + 1;
      if (layout->coordinate(q, "ep") == e) edp_members += q + 1;
    }
    EXPECT_EQ(group_rank_sum((*mesh)->expert()), ep_members) << order;
    EXPECT_EQ(group_rank_sum((*mesh)->expert_data()), edp_members) << order;
    auto dry = DeviceMesh::dry_run(MeshShape{.data = 4, .expert = 2}, r);
    ASSERT_TRUE(dry.ok()) << dry.status();
    EXPECT_EQ((*dry)->data().world_size(), 4);
    EXPECT_EQ((*dry)->expert().world_size(), 2);
    EXPECT_EQ((*dry)->expert_data().world_size(), 2);
    EXPECT_EQ((*dry)->coordinates().data, r);
  }
}

TEST(DeviceMeshTest, SendAndReceiveAroundARing) {
  const int w = world().world_size(), r = world().rank();
  if (w == 1) {
    int v = 0;
    const absl::Status s = world().send_async(&v, 1, DType::kI32, 0)->wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("send to rank 0: not a peer of rank 0"), std::string_view::npos) << s;
    return;
  }
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  std::vector<float> out(1000), in(1000, -1.0f);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(r * 1000 + static_cast<int>(i));
  // Even ranks send first, odd ranks receive first: no two neighbours both
  // wait in a send.
  if (r % 2 == 0) {
    ASSERT_TRUE(world().send_async(out.data(), 1000, DType::kF32, next)->wait().ok());
    ASSERT_TRUE(world().recv_async(in.data(), 1000, DType::kF32, prev)->wait().ok());
  } else {
    ASSERT_TRUE(world().recv_async(in.data(), 1000, DType::kF32, prev)->wait().ok());
    ASSERT_TRUE(world().send_async(out.data(), 1000, DType::kF32, next)->wait().ok());
  }
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], static_cast<float>(prev * 1000 + static_cast<int>(i))) << i;
}

TEST(DeviceMeshTest, TheEngineShardsOverTheDataGroupAndWantsTheModelBuiltAsItsStage) {
  const int w = world().world_size();
  CpuBackend backend;
  EngineConfig ec;
  ec.zero.stage = ZeroStage::k2;
  const GptConfig g{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 17, .seq_len = 8};
  auto mesh = DeviceMesh::create(world());
  ASSERT_TRUE(mesh.ok());
  auto engine = Engine::create(std::make_unique<Gpt>(g), ec, backend, **mesh);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ(&(*engine)->comm(), &(*mesh)->data());
  EXPECT_EQ((*engine)->comm().world_size(), w);
  EXPECT_EQ((*mesh)->embedding(), nullptr);
  if (w % 2 == 0) {
    auto pp = DeviceMesh::create(world(), 1, 2);
    ASSERT_TRUE(pp.ok());
    // The whole model on a rank of a 2-stage mesh: refused, naming both.
    auto refused = Engine::create(std::make_unique<Gpt>(g), ec, backend, **pp);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("pipeline 2"), std::string_view::npos) << refused.status();
    const int stage = (*pp)->coordinates().pipeline;
    // Both stages hold the token table: the embedding group is the 2 D ranks of the two stages.
    ASSERT_NE((*pp)->embedding(), nullptr);
    EXPECT_EQ((*pp)->embedding()->world_size(), w);
    EXPECT_EQ((*pp)->embedding()->rank(), stage * (w / 2) + (*pp)->coordinates().data);
    // ZeRO-3 with stages: refused, naming the stage.
    ec.zero.stage = ZeroStage::k3;
    auto stage3 = Engine::create(std::make_unique<Gpt>(g, nullptr, false, PipelineStage{stage, 2}), ec, backend, **pp);
    EXPECT_EQ(stage3.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(stage3.status().message().find("stage 3"), std::string_view::npos) << stage3.status();
    // As its stage, at ZeRO-2: built, and forward() points to train_batch().
    ec.zero.stage = ZeroStage::k2;
    auto built = Engine::create(std::make_unique<Gpt>(g, nullptr, false, PipelineStage{stage, 2}), ec, backend, **pp);
    ASSERT_TRUE(built.ok()) << built.status();
    const absl::Status direct = (*built)->forward(Batch{}).status();
    EXPECT_EQ(direct.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(direct.message().find("train_batch"), std::string_view::npos) << direct;
  }
}

}  // namespace
}  // namespace zero
