// Progress per group on the MPI communicator (2 ranks; each schedule below
// deadlocks when one thread runs every MPI call in issue order, and the
// test's ZE_COMM_TIMEOUT_S=30 turns that into a failed wait naming the
// operation rather than a hang):
//  * a receive posted early, then sends to the same peer issued before
//    waiting on it (a pipeline stage posting its next input's receive as
//    soon as the buffer is free), with messages far above the eager limit,
//    so a send cannot complete before the peer's matching receive is posted;
//  * two groups over the same ranks whose collectives the two ranks issue in
//    opposite orders: the one issued first on rank 0 completes only after
//    the one rank 1 issued first;
//  * a send issued behind a collective still waiting for the peer, on the
//    same group, while the peer receives before joining the collective;
//  * the transfers' contents and the comm log's rows for them.
#include <gtest/gtest.h>

#include <vector>

#include "comm/comm_log.h"
#include "core/dtype.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

constexpr int64_t kLarge = 1 << 20;  // 4 MiB of fp32: rendezvous, never eager

std::vector<float> filled(int64_t n, int rank, int round) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 1000 + round * 10 + i % 7);
  return v;
}

int64_t mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  return wrong;
}

TEST(AsyncProgressTest, AnEarlyReceiveDoesNotBlockLaterSendsToTheSamePeer) {
  if (world().world_size() != 2) GTEST_SKIP() << "a 2-rank schedule";
  const int me = world().rank(), peer = 1 - me;
  for (int round = 0; round < 3; ++round) {
    std::vector<float> in(kLarge, -1.0f), in2(kLarge, -1.0f);
    const std::vector<float> out = filled(kLarge, me, round), out2 = filled(kLarge, me, round + 5);
    // Both ranks post their receive first, then send twice (the second
    // matched by a receive posted after the first send), then wait.
    CommHandle early = world().recv_async(in.data(), kLarge, DType::kF32, peer);
    EXPECT_TRUE(world().send_async(out.data(), kLarge, DType::kF32, peer)->wait().ok());
    CommHandle later = world().recv_async(in2.data(), kLarge, DType::kF32, peer);
    EXPECT_TRUE(world().send_async(out2.data(), kLarge, DType::kF32, peer)->wait().ok());
    EXPECT_TRUE(early->wait().ok());
    EXPECT_TRUE(later->wait().ok());
    EXPECT_TRUE(early->done());
    EXPECT_EQ(mismatches(in, filled(kLarge, peer, round)), 0) << "round " << round;
    EXPECT_EQ(mismatches(in2, filled(kLarge, peer, round + 5)), 0) << "round " << round;
  }
  // send_recv after an early receive: the exchange's own receive matches the
  // peer's second message, the early one its first.
  std::vector<float> early_in(kLarge, -1.0f), swapped(kLarge, -1.0f);
  const std::vector<float> first = filled(kLarge, me, 20), second = filled(kLarge, me, 21);
  CommHandle early = world().recv_async(early_in.data(), kLarge, DType::kF32, peer);
  EXPECT_TRUE(world().send_async(first.data(), kLarge, DType::kF32, peer)->wait().ok());
  EXPECT_TRUE(world().send_recv_async(second.data(), kLarge, swapped.data(), kLarge, DType::kF32, peer)->wait().ok());
  EXPECT_TRUE(early->wait().ok());
  EXPECT_EQ(mismatches(early_in, filled(kLarge, peer, 20)), 0);
  EXPECT_EQ(mismatches(swapped, filled(kLarge, peer, 21)), 0);
}

TEST(AsyncProgressTest, TwoGroupsCollectivesProgressIndependently) {
  if (world().world_size() != 2) GTEST_SKIP() << "a 2-rank schedule";
  auto a = world().split(0, world().rank());
  auto b = world().split(0, world().rank());
  ASSERT_TRUE(a.ok() && b.ok());
  const int me = world().rank();
  for (int round = 0; round < 3; ++round) {
    std::vector<float> on_a(kLarge, static_cast<float>(me + 1)), on_b(kLarge, static_cast<float>(10 * (me + 1)));
    // Rank 0 issues A then B and waits on A first; rank 1 issues B then A.
    // With one queue, rank 0's A waits for rank 1, whose queue is in B.
    CommHandle ha, hb;
    if (me == 0) {
      ha = (*a)->all_reduce_async(on_a.data(), kLarge, DType::kF32, ReduceOp::kSum);
      hb = (*b)->all_reduce_async(on_b.data(), kLarge, DType::kF32, ReduceOp::kSum);
    } else {
      hb = (*b)->all_reduce_async(on_b.data(), kLarge, DType::kF32, ReduceOp::kSum);
      ha = (*a)->all_reduce_async(on_a.data(), kLarge, DType::kF32, ReduceOp::kSum);
    }
    EXPECT_TRUE(ha->wait().ok());
    EXPECT_TRUE(hb->wait().ok());
    EXPECT_EQ(mismatches(on_a, std::vector<float>(kLarge, 3.0f)), 0) << "round " << round;
    EXPECT_EQ(mismatches(on_b, std::vector<float>(kLarge, 30.0f)), 0) << "round " << round;
  }
  // Still ordered within a group: three all-reduces on A, waited last first.
  std::vector<std::vector<float>> bufs(3, std::vector<float>(1000));
  std::vector<CommHandle> hs;
  for (int k = 0; k < 3; ++k) {
    std::fill(bufs[k].begin(), bufs[k].end(), static_cast<float>(k + me));
    hs.push_back((*a)->all_reduce_async(bufs[k].data(), 1000, DType::kF32, ReduceOp::kSum));
  }
  EXPECT_TRUE(hs[2]->wait().ok());
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(hs[k]->wait().ok());
    EXPECT_EQ(bufs[k][999], static_cast<float>(2 * k + 1));
  }
}

TEST(AsyncProgressTest, ASendIsNotQueuedBehindTheGroupsCollective) {
  if (world().world_size() != 2) GTEST_SKIP() << "a 2-rank schedule";
  auto g = world().split(0, world().rank());
  ASSERT_TRUE(g.ok());
  const int me = world().rank();
  std::vector<float> sum(1000, 1.0f), data(kLarge, -1.0f);
  const std::vector<float> sent = filled(kLarge, 0, 7);
  if (me == 0) {
    // The all-reduce waits for rank 1, which first waits for this send.
    CommHandle reduce = (*g)->all_reduce_async(sum.data(), 1000, DType::kF32, ReduceOp::kSum);
    EXPECT_TRUE((*g)->send_async(sent.data(), kLarge, DType::kF32, 1)->wait().ok());
    EXPECT_TRUE(reduce->wait().ok());
  } else {
    EXPECT_TRUE((*g)->recv_async(data.data(), kLarge, DType::kF32, 0)->wait().ok());
    EXPECT_TRUE((*g)->all_reduce(sum.data(), 1000, DType::kF32, ReduceOp::kSum).ok());
    EXPECT_EQ(mismatches(data, sent), 0);
  }
  EXPECT_EQ(sum[0], 2.0f);
}

TEST(AsyncProgressTest, TransfersAreLoggedOnceWhenTheyComplete) {
  if (world().world_size() != 2) GTEST_SKIP() << "a 2-rank schedule";
  auto g = world().split(0, world().rank());
  ASSERT_TRUE(g.ok());
  CommLog log;
  (*g)->set_log(&log, "pipeline");
  const int me = world().rank(), peer = 1 - me;
  std::vector<float> in(64), out(64, 1.0f);
  CommHandle r = (*g)->recv_async(in.data(), 64, DType::kF32, peer);
  CommHandle s = (*g)->send_async(out.data(), 64, DType::kF32, peer);
  EXPECT_TRUE(s->wait().ok());
  EXPECT_TRUE(r->wait().ok());
  EXPECT_TRUE(r->wait().ok());  // a second wait records nothing more
  int64_t sends = 0, recvs = 0;
  for (const CommLogRow& row : log.rows()) {
    EXPECT_EQ(row.group, "pipeline");
    EXPECT_EQ(row.message_bytes, 256);
    if (row.op == CommOp::kSend) sends += row.count;
    if (row.op == CommOp::kRecv) recvs += row.count;
  }
  EXPECT_EQ(sends, 1);
  EXPECT_EQ(recvs, 1);
  (*g)->set_log(nullptr);
}

}  // namespace
}  // namespace zero
