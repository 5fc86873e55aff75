// FlatLayout (zero/flat_layout.h), the packing ZeRO-1/2 use for the flat
// parameter, gradient and optimizer buffers, checked directly with
// hand-computed numbers:
//  * parameters are packed back to back in the given order with no gaps
//    (offset of each = sum of the sizes before it), real_numel() is their sum;
//  * numel() is real_numel() rounded up to pad_multiple (no padding when it
//    already divides), 0 for no parameters, and pad_multiple < 1 is refused;
//  * with pad_multiple = 2 x world (what stages 1-2 use) for world sizes 1-4,
//    the partitions [r * numel / world, (r + 1) * numel / world) have equal
//    size, start on an even element, tile [0, numel()) without overlap, the
//    last one ends at numel() and holds the tail padding, and each parameter
//    falls into the ranks computed by hand;
//  * param_view() is the parameter's own elements of a flat buffer, with its
//    shape: writing through every view leaves the padding untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "zero/flat_layout.h"

namespace zero {
namespace {

// Parameters of the given shapes, named p0, p1, ...
struct Params {
  std::vector<std::unique_ptr<Parameter>> owned;
  explicit Params(const std::vector<Shape>& shapes) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::string name = "p";
      name += std::to_string(i);
      owned.push_back(std::make_unique<Parameter>(name, shapes[i], ParamInit::zeros()));
    }
  }
  std::vector<Parameter*> ptrs() const {
    std::vector<Parameter*> out;
    for (const auto& p : owned) out.push_back(p.get());
    return out;
  }
};

TEST(FlatLayoutTest, DefaultIsEmpty) {
  const FlatLayout layout;
  EXPECT_EQ(layout.numel(), 0);
  EXPECT_EQ(layout.real_numel(), 0);
  EXPECT_TRUE(layout.segments().empty());
}

TEST(FlatLayoutTest, NoParametersHaveNoElementsWhateverThePadding) {
  const FlatLayout layout({}, 8);
  EXPECT_EQ(layout.numel(), 0);
  EXPECT_EQ(layout.real_numel(), 0);
  EXPECT_TRUE(layout.segments().empty());
}

TEST(FlatLayoutTest, PacksBackToBackInTheGivenOrder) {
  // Sizes 3, 5 (a 5-vector), 6 (2x3), 1: offsets 0, 3, 8, 14; 15 in all.
  Params ps({{3}, {5}, {2, 3}, {1}});
  const FlatLayout layout(ps.ptrs());
  ASSERT_EQ(layout.segments().size(), 4u);
  const int64_t expected_offsets[] = {0, 3, 8, 14};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(layout.segments()[i].param, ps.owned[i].get()) << i;
    EXPECT_EQ(layout.segments()[i].offset, expected_offsets[i]) << i;
  }
  EXPECT_EQ(layout.real_numel(), 15);
  EXPECT_EQ(layout.numel(), 15);  // pad_multiple defaults to 1: no padding
}

TEST(FlatLayoutTest, KeepsTheCallersOrderNotSortedBySize) {
  // Sizes 12 (4x3), 1, 7: offsets 0, 12, 13.
  Params ps({{4, 3}, {1}, {7}});
  std::vector<Parameter*> order = {ps.owned[2].get(), ps.owned[0].get(), ps.owned[1].get()};
  const FlatLayout layout(order);
  ASSERT_EQ(layout.segments().size(), 3u);
  // p2 (7) at 0, p0 (12) at 7, p1 (1) at 19.
  EXPECT_EQ(layout.segments()[0].param, ps.owned[2].get());
  EXPECT_EQ(layout.segments()[0].offset, 0);
  EXPECT_EQ(layout.segments()[1].param, ps.owned[0].get());
  EXPECT_EQ(layout.segments()[1].offset, 7);
  EXPECT_EQ(layout.segments()[2].param, ps.owned[1].get());
  EXPECT_EQ(layout.segments()[2].offset, 19);
  EXPECT_EQ(layout.real_numel(), 20);
}

TEST(FlatLayoutTest, PadsUpToTheMultipleOnly) {
  Params ps({{3}, {5}, {2, 1}});  // 10 elements
  EXPECT_EQ(FlatLayout(ps.ptrs(), 1).numel(), 10);
  EXPECT_EQ(FlatLayout(ps.ptrs(), 2).numel(), 10);  // already a multiple
  EXPECT_EQ(FlatLayout(ps.ptrs(), 5).numel(), 10);
  EXPECT_EQ(FlatLayout(ps.ptrs(), 3).numel(), 12);
  EXPECT_EQ(FlatLayout(ps.ptrs(), 4).numel(), 12);
  EXPECT_EQ(FlatLayout(ps.ptrs(), 8).numel(), 16);
  EXPECT_EQ(FlatLayout(ps.ptrs(), 11).numel(), 11);
  EXPECT_EQ(FlatLayout(ps.ptrs(), 64).numel(), 64);  // larger than the whole model
  // Padding never moves a parameter nor changes real_numel.
  const FlatLayout padded(ps.ptrs(), 8);
  EXPECT_EQ(padded.real_numel(), 10);
  EXPECT_EQ(padded.segments()[2].offset, 8);
}

TEST(FlatLayoutDeathTest, RefusesAPadMultipleBelowOne) {
  Params ps(std::vector<Shape>{{4}});
  EXPECT_DEATH({ const FlatLayout layout(ps.ptrs(), 0); }, "check failed: \\(pad_multiple\\) >= \\(1\\)");
}

// One layout padded to 2 x world, with its partitions and how each parameter
// (and the tail padding) splits across the ranks, all computed by hand.
struct PartitionCase {
  std::vector<Shape> shapes;
  int world;
  int64_t numel;                           // real size rounded up to 2 * world
  int64_t part;                            // numel / world
  std::vector<std::vector<int64_t>> owns;  // owns[i][r]: elements of parameter i in rank r's partition
  std::vector<int64_t> padding;            // padding elements in each rank's partition
};

// Elements of [begin, end) inside [lo, hi).
int64_t overlap(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  return std::max<int64_t>(0, std::min(end, hi) - std::max(begin, lo));
}

class FlatLayoutPartitionTest : public ::testing::TestWithParam<PartitionCase> {};

TEST_P(FlatLayoutPartitionTest, PartitionsAreEqualEvenAndTileTheBuffer) {
  const PartitionCase& c = GetParam();
  Params ps(c.shapes);
  const FlatLayout layout(ps.ptrs(), 2 * c.world);
  EXPECT_EQ(layout.numel(), c.numel);
  ASSERT_EQ(layout.numel() % (2 * c.world), 0);
  const int64_t part = layout.numel() / c.world;
  EXPECT_EQ(part, c.part);
  EXPECT_EQ(part % 2, 0) << "every partition starts on an even element";

  // The ranks' ranges tile [0, numel) in rank order: no gap, no overlap, the
  // last one ends at numel and so holds the tail padding.
  int64_t expected_begin = 0;
  for (int r = 0; r < c.world; ++r) {
    const int64_t lo = r * part, hi = (r + 1) * part;
    EXPECT_EQ(lo, expected_begin) << "rank " << r;
    EXPECT_EQ(hi - lo, c.part) << "rank " << r;
    EXPECT_EQ(lo % 2, 0) << "rank " << r;
    expected_begin = hi;
  }
  EXPECT_EQ(expected_begin, layout.numel());

  // Each parameter's elements land in the ranks computed by hand, and the
  // padding [real_numel, numel) only at the end.
  ASSERT_EQ(layout.segments().size(), c.owns.size());
  for (size_t i = 0; i < c.owns.size(); ++i) {
    const FlatSegment& seg = layout.segments()[i];
    int64_t total = 0;
    for (int r = 0; r < c.world; ++r) {
      const int64_t n = overlap(seg.offset, seg.offset + seg.param->numel(), r * part, (r + 1) * part);
      EXPECT_EQ(n, c.owns[i][r]) << "parameter " << i << ", rank " << r;
      total += n;
    }
    EXPECT_EQ(total, seg.param->numel()) << "parameter " << i << " is covered exactly once";
  }
  for (int r = 0; r < c.world; ++r)
    EXPECT_EQ(overlap(layout.real_numel(), layout.numel(), r * part, (r + 1) * part), c.padding[r]) << "rank " << r;
}

// Sizes 3, 5, 2 (offsets 0, 3, 8; 10 real elements) and sizes 7, 1, 12
// (offsets 0, 7, 8; 20 real elements), padded to 2 x world.
INSTANTIATE_TEST_SUITE_P(
    Worlds, FlatLayoutPartitionTest,
    ::testing::Values(
        // 10 -> 10 (multiple of 2), one partition of everything.
        PartitionCase{{{3}, {5}, {2, 1}}, 1, 10, 10, {{3}, {5}, {2}}, {0}},
        // 10 -> 12 (multiple of 4), partitions [0,6) [6,12): p1 = [3,8) splits 3 + 2.
        PartitionCase{{{3}, {5}, {2, 1}}, 2, 12, 6, {{3, 0}, {3, 2}, {0, 2}}, {0, 2}},
        // 10 -> 12 (multiple of 6), partitions [0,4) [4,8) [8,12).
        PartitionCase{{{3}, {5}, {2, 1}}, 3, 12, 4, {{3, 0, 0}, {1, 4, 0}, {0, 0, 2}}, {0, 0, 2}},
        // 10 -> 16 (multiple of 8), partitions of 4: the last rank holds only padding.
        PartitionCase{{{3}, {5}, {2, 1}}, 4, 16, 4, {{3, 0, 0, 0}, {1, 4, 0, 0}, {0, 0, 2, 0}}, {0, 0, 2, 4}},
        // 20 -> 20, one partition.
        PartitionCase{{{7}, {1}, {4, 3}}, 1, 20, 20, {{7}, {1}, {12}}, {0}},
        // 20 -> 20 (already a multiple of 4), [0,10) [10,20): p2 = [8,20) splits 2 + 10, no padding.
        PartitionCase{{{7}, {1}, {4, 3}}, 2, 20, 10, {{7, 0}, {1, 0}, {2, 10}}, {0, 0}},
        // 20 -> 24 (multiple of 6), partitions of 8: p2 = [8,20) is all of rank 1 and half of rank 2.
        PartitionCase{{{7}, {1}, {4, 3}}, 3, 24, 8, {{7, 0, 0}, {1, 0, 0}, {0, 8, 4}}, {0, 0, 4}},
        // 20 -> 24 (multiple of 8), partitions of 6: p0 = [0,7) crosses into rank 1.
        PartitionCase{{{7}, {1}, {4, 3}}, 4, 24, 6, {{6, 1, 0, 0}, {0, 1, 0, 0}, {0, 4, 6, 2}}, {0, 0, 0, 4}},
        // One element on 4 ranks: 1 -> 8, partitions of 2, all but rank 0's pure padding.
        PartitionCase{{{1}}, 4, 8, 2, {{1, 0, 0, 0}}, {1, 2, 2, 2}},
        // 16 elements on 4 ranks are already a multiple of 8: no padding at all.
        PartitionCase{{{2, 4}, {8}}, 4, 16, 4, {{4, 4, 0, 0}, {0, 0, 4, 4}}, {0, 0, 0, 0}}));

TEST(FlatLayoutTest, ParamViewsAreTheParametersOwnElements) {
  Params ps({{3}, {5}, {2, 1}});
  const FlatLayout layout(ps.ptrs(), 8);  // 10 real elements, 16 in all
  std::vector<float> buffer(16, 0.0f);
  const Tensor flat = Tensor::wrap(buffer.data(), {16}, DType::kF32);
  for (size_t i = 0; i < layout.segments().size(); ++i) {
    const FlatSegment& seg = layout.segments()[i];
    const Tensor view = layout.param_view(flat, seg);
    EXPECT_EQ(view.shape(), seg.param->shape()) << i;
    EXPECT_EQ(view.numel(), seg.param->numel()) << i;
    EXPECT_EQ(view.data(), buffer.data() + seg.offset) << i;
    for (int64_t k = 0; k < view.numel(); ++k) view.f32()[k] = static_cast<float>(i + 1);
  }
  const std::vector<float> expected = {1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(buffer, expected);
}

}  // namespace
}  // namespace zero
