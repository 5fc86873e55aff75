// The windows stages 2 and 3 hold beside their partitions
// (zero/window_sizes.h), sized for a model of n trainable elements on W
// ranks:
//  * a window the config left unset is capped at an eighth of the elements
//    the partitioning saves, n - ceil(n / W) (SmolLM-135M on 2 ranks: its
//    5e8-element default bucket becomes 8.4M elements);
//  * a window the config set is kept, however large;
//  * DeepSpeed's default stays where it is smaller than the cap (a model
//    large enough that it saves more than 8 x 5e8 elements);
//  * stages 0 and 1 hold no window and are left alone; stage 2 caps only the
//    reduce buckets; stage 3 caps all four, but its gather windows not with
//    offload_param (they hide the reads); one rank saves nothing and keeps
//    DeepSpeed's defaults; a cap is never below one element.
#include <gtest/gtest.h>

#include "zero/window_sizes.h"

namespace zero {
namespace {

constexpr int64_t kSmolLm = 134515008;  // SmolLM-135M's trainable elements (tied head)

ZeroConfig unset_at(ZeroStage stage) {
  ZeroConfig z;
  z.stage = stage;
  z.given = {false, false, false, false};
  return z;
}

TEST(WindowSizesTest, UnsetWindowsAreAnEighthOfWhatThePartitioningSaves) {
  const int64_t saved = kSmolLm - kSmolLm / 2;
  const ZeroConfig two = windows_for_model(unset_at(ZeroStage::k2), kSmolLm, 2);
  EXPECT_EQ(two.reduce_bucket_size, saved / 8);
  EXPECT_EQ(two.prefetch_bucket_size, 50000000) << "stage 2 gathers nothing";
  const ZeroConfig three = windows_for_model(unset_at(ZeroStage::k3), kSmolLm, 2);
  EXPECT_EQ(three.reduce_bucket_size, saved / 8);
  EXPECT_EQ(three.prefetch_bucket_size, saved / 8);
  EXPECT_EQ(three.max_live_parameters, saved / 8);
  EXPECT_EQ(three.max_reuse_distance, saved / 8);
  // 8 ranks save 7/8 of an odd count: n - ceil(n / 8).
  const int64_t n = 1000003;
  EXPECT_EQ(windows_for_model(unset_at(ZeroStage::k2), n, 8).reduce_bucket_size, (n - (n + 7) / 8) / 8);
}

TEST(WindowSizesTest, WindowsTheConfigSetAreKept) {
  ZeroConfig z = unset_at(ZeroStage::k3);
  z.given = {true, true, true, true};
  const ZeroConfig out = windows_for_model(z, kSmolLm, 2);
  EXPECT_EQ(out.reduce_bucket_size, 500000000);
  EXPECT_EQ(out.prefetch_bucket_size, 50000000);
  EXPECT_EQ(out.max_live_parameters, 1000000000);
  EXPECT_EQ(out.max_reuse_distance, 1000000000);
  z.given = {false, true, false, true};  // one key at a time
  const ZeroConfig some = windows_for_model(z, kSmolLm, 2);
  EXPECT_LT(some.reduce_bucket_size, 500000000);
  EXPECT_EQ(some.prefetch_bucket_size, 50000000);
  EXPECT_LT(some.max_live_parameters, 1000000000);
  EXPECT_EQ(some.max_reuse_distance, 1000000000);
}

TEST(WindowSizesTest, DeepSpeedsDefaultsStandForLargeModels) {
  // 70B on 64 ranks saves 6.9e10 elements: an eighth is above every default.
  const ZeroConfig z = windows_for_model(unset_at(ZeroStage::k3), 70000000000, 64);
  EXPECT_EQ(z.reduce_bucket_size, 500000000);
  EXPECT_EQ(z.prefetch_bucket_size, 50000000);
  EXPECT_EQ(z.max_live_parameters, 1000000000);
  EXPECT_EQ(z.max_reuse_distance, 1000000000);
}

TEST(WindowSizesTest, StagesWithoutWindowsAndOneRank) {
  for (ZeroStage s : {ZeroStage::k0, ZeroStage::k1}) {
    const ZeroConfig z = windows_for_model(unset_at(s), kSmolLm, 2);
    EXPECT_EQ(z.reduce_bucket_size, 500000000) << "stage " << stage_number(s) << " reduces in place";
  }
  // One rank saves nothing by partitioning: DeepSpeed's defaults stand.
  const ZeroConfig one = windows_for_model(unset_at(ZeroStage::k3), kSmolLm, 1);
  EXPECT_EQ(one.reduce_bucket_size, 500000000);
  EXPECT_EQ(one.prefetch_bucket_size, 50000000);
  // Parameters offloaded: the gather windows hide their reads; the buckets are still capped.
  ZeroConfig offloaded = unset_at(ZeroStage::k3);
  offloaded.offload_param.device = OffloadDevice::kNvme;
  const ZeroConfig o = windows_for_model(offloaded, kSmolLm, 2);
  EXPECT_EQ(o.reduce_bucket_size, (kSmolLm - kSmolLm / 2) / 8);
  EXPECT_EQ(o.prefetch_bucket_size, 50000000);
  EXPECT_EQ(o.max_live_parameters, 1000000000);
  EXPECT_EQ(o.max_reuse_distance, 1000000000);
  // Tiny models: never below one element.
  EXPECT_EQ(windows_for_model(unset_at(ZeroStage::k2), 9, 2).reduce_bucket_size, 1);
}

}  // namespace
}  // namespace zero
