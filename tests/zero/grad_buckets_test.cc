// Gradient bucket planning for ZeRO stages 0-2 (zero/grad_buckets.h), checked
// directly with hand-computed buckets:
//  * plan_grad_buckets() lists buckets in the order backward completes them
//    (the end of the flat layout first), each a contiguous element range of
//    whole parameters, listed in backward order (last parameter first);
//  * a bucket holds parameters up to reduce_bucket_size elements (a limit of
//    exactly the bucket's size still fits), greedily from the back of the
//    layout; a parameter larger than the limit is a bucket of its own; a
//    limit of 0 or less behaves as 1 (one bucket per parameter);
//  * the tail padding belongs to the bucket of the last parameter, so the
//    buckets tile [0, numel()) and cover every element and every parameter
//    exactly once (also over a sweep of layouts, paddings and limits);
//  * partition_counts() splits a bucket's range over the ranks' partitions;
//  * count_parameter_uses() counts the modules using each parameter (a tied
//    parameter twice).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/testing/leaf_module.h"
#include "zero/grad_buckets.h"

namespace zero {
namespace {

// Parameters of the given sizes, named p0, p1, ..., in layout order.
struct Params {
  std::vector<std::unique_ptr<Parameter>> owned;
  explicit Params(const std::vector<int64_t>& sizes) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string name = "p";
      name += std::to_string(i);
      owned.push_back(std::make_unique<Parameter>(name, Shape{sizes[i]}, ParamInit::zeros()));
    }
  }
  std::vector<Parameter*> ptrs() const {
    std::vector<Parameter*> out;
    for (const auto& p : owned) out.push_back(p.get());
    return out;
  }
};

// A bucket as the test spells it: [begin, end) and the indices of its parameters, in the listed order.
struct Expected {
  int64_t begin, end;
  std::vector<int> params;
};

void expect_buckets(const Params& ps, const std::vector<GradBucket>& got, const std::vector<Expected>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b < want.size(); ++b) {
    EXPECT_EQ(got[b].begin, want[b].begin) << "bucket " << b;
    EXPECT_EQ(got[b].end, want[b].end) << "bucket " << b;
    std::vector<Parameter*> params;
    for (int i : want[b].params) params.push_back(ps.owned[i].get());
    EXPECT_EQ(got[b].params, params) << "bucket " << b;
  }
}

// Sizes 3, 5, 2: offsets 0, 3, 8, 10 elements.
TEST(PlanGradBucketsTest, OneBigBucketInBackwardOrder) {
  Params ps({3, 5, 2});
  const FlatLayout layout(ps.ptrs());
  expect_buckets(ps, plan_grad_buckets(layout, 1000), {{0, 10, {2, 1, 0}}});
}

TEST(PlanGradBucketsTest, ALimitOfExactlyTheWholeModelStillFits) {
  Params ps({3, 5, 2});
  const FlatLayout layout(ps.ptrs());
  expect_buckets(ps, plan_grad_buckets(layout, 10), {{0, 10, {2, 1, 0}}});
}

TEST(PlanGradBucketsTest, FillsFromTheBackOfTheLayout) {
  Params ps({3, 5, 2});
  const FlatLayout layout(ps.ptrs());
  // p2 + p1 = 7 fit in 7, 8 or 9; adding p0 makes 10: p0 starts the next bucket.
  for (int64_t limit : {7, 8, 9}) {
    SCOPED_TRACE(limit);
    expect_buckets(ps, plan_grad_buckets(layout, limit), {{3, 10, {2, 1}}, {0, 3, {0}}});
  }
  // With 6, p2 + p1 = 7 do not fit, nor p1 + p0 = 8: one bucket each, last first.
  expect_buckets(ps, plan_grad_buckets(layout, 6), {{8, 10, {2}}, {3, 8, {1}}, {0, 3, {0}}});
}

TEST(PlanGradBucketsTest, GroupsGreedilyFromTheBack) {
  // Sizes 2, 2, 2, 6: offsets 0, 2, 4, 6, 12 elements.
  Params ps({2, 2, 2, 6});
  const FlatLayout layout(ps.ptrs());
  // Limit 6: p3 fills a bucket; p2 + p1 + p0 = 6 fill the next.
  expect_buckets(ps, plan_grad_buckets(layout, 6), {{6, 12, {3}}, {0, 6, {2, 1, 0}}});
  // Limit 4: p3 (6 > 4) alone; p2 + p1 = 4; p0 is left on its own at the front.
  expect_buckets(ps, plan_grad_buckets(layout, 4), {{6, 12, {3}}, {2, 6, {2, 1}}, {0, 2, {0}}});
  // Limit 8: p3 + p2 = 8; p1 + p0 = 4.
  expect_buckets(ps, plan_grad_buckets(layout, 8), {{4, 12, {3, 2}}, {0, 4, {1, 0}}});
}

TEST(PlanGradBucketsTest, OneBucketPerParameterWithALimitOfOneOrLess) {
  Params ps({3, 5, 2});
  const FlatLayout layout(ps.ptrs());
  const std::vector<Expected> each = {{8, 10, {2}}, {3, 8, {1}}, {0, 3, {0}}};
  for (int64_t limit : {1, 0, -5}) {
    SCOPED_TRACE(limit);
    expect_buckets(ps, plan_grad_buckets(layout, limit), each);
  }
}

TEST(PlanGradBucketsTest, AParameterLargerThanTheLimitIsABucketOfItsOwn) {
  // Sizes 2, 20, 3: offsets 0, 2, 22, 25 elements. p0 and p2 would fit
  // together in 5 but are not adjacent: buckets are contiguous ranges.
  Params ps({2, 20, 3});
  const FlatLayout layout(ps.ptrs());
  expect_buckets(ps, plan_grad_buckets(layout, 5), {{22, 25, {2}}, {2, 22, {1}}, {0, 2, {0}}});
  // With 23, p2 + p1 = 23 fit, p0 does not.
  expect_buckets(ps, plan_grad_buckets(layout, 23), {{2, 25, {2, 1}}, {0, 2, {0}}});
}

TEST(PlanGradBucketsTest, TheTailPaddingRidesWithTheLastParameter) {
  // Sizes 3, 5, 2 padded to 8 (2 x world 4): 16 elements, 6 of them padding.
  Params ps({3, 5, 2});
  const FlatLayout layout(ps.ptrs(), 8);
  ASSERT_EQ(layout.numel(), 16);
  expect_buckets(ps, plan_grad_buckets(layout, 1000), {{0, 16, {2, 1, 0}}});
  expect_buckets(ps, plan_grad_buckets(layout, 1), {{8, 16, {2}}, {3, 8, {1}}, {0, 3, {0}}});
  // 6: neither p2 + p1 (7) nor p1 + p0 (8) fit, with or without the padding.
  expect_buckets(ps, plan_grad_buckets(layout, 6), {{8, 16, {2}}, {3, 8, {1}}, {0, 3, {0}}});
}

TEST(PlanGradBucketsTest, ASingleParameterIsOneBucket) {
  Params ps({7});
  expect_buckets(ps, plan_grad_buckets(FlatLayout(ps.ptrs()), 1), {{0, 7, {0}}});
  expect_buckets(ps, plan_grad_buckets(FlatLayout(ps.ptrs(), 6), 100), {{0, 12, {0}}});
}

// The documented rules over many layouts, paddings and limits: the buckets
// tile the layout from its end, each parameter is in exactly one, whole, in
// backward order; a bucket exceeds the limit only when it holds a single
// parameter; and no bucket could have taken the parameter in front of it.
TEST(PlanGradBucketsTest, BucketsCoverEveryElementAndParameterExactlyOnce) {
  const std::vector<std::vector<int64_t>> layouts = {
      {1}, {3, 5, 2}, {2, 2, 2, 6}, {2, 20, 3}, {1, 1, 1, 1, 1, 1, 1}, {9, 1, 4, 4, 1, 9, 2, 7}, {16, 3, 3, 16}};
  for (const auto& sizes : layouts) {
    Params ps(sizes);
    for (int64_t pad : {1, 2, 4, 6, 8}) {
      const FlatLayout layout(ps.ptrs(), pad);
      for (int64_t limit : {0, 1, 2, 3, 4, 5, 7, 8, 10, 16, 19, 32, 1000}) {
        SCOPED_TRACE(::testing::Message() << "layout of " << sizes.size() << " (first " << sizes[0] << "), pad "
                                        << pad << ", limit " << limit);
        const std::vector<GradBucket> buckets = plan_grad_buckets(layout, limit);
        ASSERT_FALSE(buckets.empty());
        EXPECT_EQ(buckets.front().end, layout.numel());
        EXPECT_EQ(buckets.back().begin, 0);
        std::vector<int> seen(sizes.size(), 0);
        int next = static_cast<int>(sizes.size()) - 1;  // the parameter backward completes next
        for (size_t b = 0; b < buckets.size(); ++b) {
          const GradBucket& bucket = buckets[b];
          ASSERT_FALSE(bucket.params.empty()) << "bucket " << b;
          EXPECT_LT(bucket.begin, bucket.end) << "bucket " << b;
          if (b + 1 < buckets.size()) {
            EXPECT_EQ(buckets[b + 1].end, bucket.begin) << "bucket " << b;
          }
          for (Parameter* p : bucket.params) {
            ASSERT_GE(next, 0);
            EXPECT_EQ(p, ps.owned[next].get()) << "bucket " << b;
            ++seen[next];
            --next;
          }
          // Whole parameters: the range starts at its front parameter and ends
          // where its back parameter ends (or at the padded end).
          const size_t first = static_cast<size_t>(next + 1);  // index of the bucket's front parameter
          const FlatSegment& front = layout.segments()[first];
          EXPECT_EQ(bucket.begin, front.offset) << "bucket " << b;
          const FlatSegment& back = layout.segments()[first + bucket.params.size() - 1];
          EXPECT_EQ(bucket.end, b == 0 ? layout.numel() : back.offset + back.param->numel()) << "bucket " << b;
          if (bucket.params.size() > 1) {
            EXPECT_LE(bucket.end - bucket.begin, std::max<int64_t>(limit, 1)) << "bucket " << b;
          }
          if (next >= 0) {  // the parameter in front did not fit
            EXPECT_GT(bucket.end - layout.segments()[next].offset, std::max<int64_t>(limit, 1)) << "bucket " << b;
          }
        }
        EXPECT_EQ(next, -1);
        for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "parameter " << i;
      }
    }
  }
}

TEST(PartitionCountsTest, SplitsARangeOverTheRanksPartitions) {
  // Partitions of 4 on 3 ranks: [0,4) [4,8) [8,12).
  EXPECT_EQ(partition_counts(3, 10, 4, 3), (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(partition_counts(0, 12, 4, 3), (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(partition_counts(4, 8, 4, 3), (std::vector<int64_t>{0, 4, 0}));
  EXPECT_EQ(partition_counts(9, 11, 4, 3), (std::vector<int64_t>{0, 0, 2}));
  EXPECT_EQ(partition_counts(5, 5, 4, 3), (std::vector<int64_t>{0, 0, 0}));
  // One rank: its partition is the whole layout.
  EXPECT_EQ(partition_counts(3, 10, 10, 1), (std::vector<int64_t>{7}));
}

TEST(PartitionCountsTest, TheBucketsOfAPaddedLayoutSplitIntoEveryRanksPartition) {
  // Sizes 3, 5, 2 padded to 8 on 4 ranks: partitions of 4. One bucket per
  // parameter: [8,16) [3,8) [0,3); rank 3's partition is all padding and comes
  // with p2's bucket, so every rank's partition is covered exactly once.
  Params ps({3, 5, 2});
  const FlatLayout layout(ps.ptrs(), 8);
  const std::vector<GradBucket> buckets = plan_grad_buckets(layout, 1);
  ASSERT_EQ(buckets.size(), 3u);
  const int64_t part = layout.numel() / 4;
  EXPECT_EQ(partition_counts(buckets[0].begin, buckets[0].end, part, 4), (std::vector<int64_t>{0, 0, 4, 4}));
  EXPECT_EQ(partition_counts(buckets[1].begin, buckets[1].end, part, 4), (std::vector<int64_t>{1, 4, 0, 0}));
  EXPECT_EQ(partition_counts(buckets[2].begin, buckets[2].end, part, 4), (std::vector<int64_t>{3, 0, 0, 0}));
}

using testing::Leaf;

TEST(CountParameterUsesTest, ATiedParameterIsUsedOncePerModule) {
  Leaf root("");
  Parameter* bias = root.own("bias", {2});
  Leaf* embed = root.add_child<Leaf>("embed");
  Parameter* wte = embed->own("wte", {5, 3});
  Leaf* block = root.add_child<Leaf>("block");
  Leaf* mlp = block->add_child<Leaf>("mlp");
  Parameter* w = mlp->own("w", {3, 3});
  Leaf* head = root.add_child<Leaf>("head");
  head->tie(wte);  // weight tying: the head reuses the embedding
  const auto uses = count_parameter_uses(root);
  EXPECT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses.at(bias), 1);
  EXPECT_EQ(uses.at(wte), 2);
  EXPECT_EQ(uses.at(w), 1);
}

}  // namespace
}  // namespace zero
