// The MPI communicator's collectives on 1-4 ranks: results every rank can
// check against the closed form (sums of rank-dependent integers are exact in
// fp32 and bf16), uneven and empty reduce-scatter parts, strided all-gather,
// and asynchronous collectives completing in issue order. All-to-all and
// all-to-all-v in fp32, bf16 and int32: every element says who sent it to
// whom, so each rank checks exactly what it received and where (uneven and
// empty parts, displacements out of rank order with gaps left untouched);
// the same on one-rank worlds (the local communicator, a one-rank MPI group),
// counts MPI cannot hold refused by name, and the bytes the dry run counts.
// Reduce-scatters in place, and reductions larger than the MPI
// communicator's chunk: exact, and leaving little of Open MPI's temporaries resident.
#include <gtest/gtest.h>

#include <climits>
#include <numeric>

#include "comm/dry_run_communicator.h"
#include "core/dtype.h"
#include "core/memory_tracker.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

TEST(CommunicatorTest, AllReduceSumAndMax) {
  const int w = world().world_size(), r = world().rank();
  std::vector<float> v(1001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7);
  EXPECT_TRUE(world().all_reduce(v.data(), static_cast<int64_t>(v.size()), DType::kF32, ReduceOp::kSum).ok());
  const float ranks_sum = static_cast<float>(w * (w + 1) / 2);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], ranks_sum * static_cast<float>(i % 7)) << i;
  float m = static_cast<float>(r);
  EXPECT_TRUE(world().all_reduce(&m, 1, DType::kF32, ReduceOp::kMax).ok());
  EXPECT_EQ(m, static_cast<float>(w - 1));
  EXPECT_EQ(world().all_reduce_sum(0.5).value(), 0.5 * w);
}

TEST(CommunicatorTest, Bf16AndFp16SumsRoundOncePerElement) {
  const int w = world().world_size(), r = world().rank();
  std::vector<uint16_t> b(37), h(37);
  for (int i = 0; i < 37; ++i) {
    b[i] = float_to_bf16(static_cast<float>(i + r));
    h[i] = float_to_fp16(static_cast<float>(i - r));
  }
  EXPECT_TRUE(world().all_reduce(b.data(), 37, DType::kBF16, ReduceOp::kSum).ok());
  EXPECT_TRUE(world().all_reduce(h.data(), 37, DType::kF16, ReduceOp::kSum).ok());
  const int rs = w * (w - 1) / 2;
  for (int i = 0; i < 37; ++i) {
    EXPECT_EQ(bf16_to_float(b[i]), static_cast<float>(w * i + rs)) << i;  // small integers: exact
    EXPECT_EQ(fp16_to_float(h[i]), static_cast<float>(w * i - rs)) << i;
  }
}

TEST(CommunicatorTest, ReduceScatterWithUnevenAndEmptyParts) {
  const int w = world().world_size(), r = world().rank();
  // Rank q's part has q * 3 elements (rank 0's is empty).
  std::vector<int64_t> counts(w);
  for (int q = 0; q < w; ++q) counts[q] = 3 * q;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> send(std::max<int64_t>(total, 1));
  for (int64_t i = 0; i < total; ++i) send[i] = static_cast<float>(i * (r + 1));
  std::vector<float> recv(std::max<int64_t>(counts[r], 1), -1.0f);
  EXPECT_TRUE(world().reduce_scatter(send.data(), recv.data(), counts, DType::kF32).ok());
  int64_t first = 0;
  for (int q = 0; q < r; ++q) first += counts[q];
  for (int64_t i = 0; i < counts[r]; ++i)
    EXPECT_EQ(recv[i], static_cast<float>((first + i) * w * (w + 1) / 2)) << i;
}

// The in-place form (recv = this rank's own part of send, as the ZeRO
// stages reduce their gradient buckets): each rank's sum lands where its
// part was, in fp32 and bf16, with uneven and empty parts.
TEST(CommunicatorTest, InPlaceReduceScatterLeavesEachRanksSumInItsOwnPart) {
  const int w = world().world_size(), r = world().rank();
  std::vector<int64_t> counts(w);
  for (int q = 0; q < w; ++q) counts[q] = 3 * q + (q == 1 ? 0 : 2);  // rank 1's part is empty
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t first = 0;
  for (int q = 0; q < r; ++q) first += counts[q];
  std::vector<float> f(total);
  std::vector<uint16_t> b(total);
  for (int64_t i = 0; i < total; ++i) {
    f[i] = static_cast<float>(i * (r + 1));
    b[i] = float_to_bf16(static_cast<float>((i % 9) * (r + 1)));
  }
  EXPECT_TRUE(world().reduce_scatter(f.data(), f.data() + first, counts, DType::kF32).ok());
  EXPECT_TRUE(world().reduce_scatter(b.data(), b.data() + first, counts, DType::kBF16).ok());
  for (int64_t i = first; i < first + counts[r]; ++i) {
    EXPECT_EQ(f[i], static_cast<float>(i * w * (w + 1) / 2)) << i;
    EXPECT_EQ(bf16_to_float(b[i]), static_cast<float>((i % 9) * w * (w + 1) / 2)) << i;
  }
}

// Collectives larger than the communicator's reduction chunk (16 MiB: Open
// MPI's temporaries are as large as one call) are exact, whatever the chunk
// and part boundaries, out of place and in place, and leave this process
// less resident memory than their own size: unchunked, a 96 MiB fp32
// reduce-scatter left 144 MiB (the ring's accumulation buffer and a block)
// resident on 2 ranks (glibc keeps what Open MPI frees); chunked, about
// 24 MiB on 2-4 ranks (the packed pieces and one call's temporaries).
TEST(CommunicatorTest, CollectivesLargerThanOneChunkAreExactAndLeaveLittleResident) {
  const int w = world().world_size(), r = world().rank();
  std::vector<int64_t> counts(w);
  for (int q = 0; q < w; ++q) counts[q] = 25'165'824 / w + 1001 * q + 3;  // 96 MiB of fp32 in all, parts uneven
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  int64_t first = 0;
  for (int q = 0; q < r; ++q) first += counts[q];
  auto value = [&](int64_t i) { return static_cast<float>((i % 1024) * (r + 1)); };
  auto sum = [&](int64_t i) { return static_cast<float>((i % 1024) * w * (w + 1) / 2); };
  std::vector<float> send(total), recv(counts[r], -1.0f);
  for (int64_t i = 0; i < total; ++i) send[i] = value(i);
  const int64_t rss_before = process_rss_bytes();
  EXPECT_TRUE(world().reduce_scatter(send.data(), recv.data(), counts, DType::kF32).ok());
  EXPECT_LT(process_rss_bytes() - rss_before, total * 4) << "a reduce-scatter's temporaries stayed resident";
  int64_t wrong = 0;
  for (int64_t i = 0; i < counts[r]; ++i) wrong += recv[i] != sum(first + i);
  EXPECT_EQ(wrong, 0) << "out of place";
  EXPECT_TRUE(world().reduce_scatter(send.data(), send.data() + first, counts, DType::kF32).ok());
  wrong = 0;
  for (int64_t i = first; i < first + counts[r]; ++i) wrong += send[i] != sum(i);
  EXPECT_EQ(wrong, 0) << "in place";
  for (int64_t i = 0; i < total; ++i) send[i] = value(i);
  EXPECT_TRUE(world().all_reduce(send.data(), total, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_LT(process_rss_bytes() - rss_before, total * 4) << "an all-reduce's temporaries stayed resident";
  wrong = 0;
  for (int64_t i = 0; i < total; ++i) wrong += send[i] != sum(i);
  EXPECT_EQ(wrong, 0) << "all-reduce";
  // bf16 (Open MPI's user-defined sum): small integers, exact.
  std::vector<uint16_t> b(total);
  for (int64_t i = 0; i < total; ++i) b[i] = float_to_bf16(static_cast<float>((i % 8) * (r + 1)));
  EXPECT_TRUE(world().reduce_scatter(b.data(), b.data() + first, counts, DType::kBF16).ok());
  wrong = 0;
  for (int64_t i = first; i < first + counts[r]; ++i)
    wrong += bf16_to_float(b[i]) != static_cast<float>((i % 8) * w * (w + 1) / 2);
  EXPECT_EQ(wrong, 0) << "bf16 in place";
}

TEST(CommunicatorTest, StridedAllGatherFillsEveryRanksBlock) {
  const int w = world().world_size(), r = world().rank();
  const int64_t block = 5, stride = 8;
  std::vector<float> buf(static_cast<size_t>(stride * w), -1.0f);
  for (int64_t i = 0; i < block; ++i) buf[r * stride + i] = static_cast<float>(100 * r + i);
  EXPECT_TRUE(world().all_gather(buf.data(), block, stride, DType::kF32).ok());
  for (int q = 0; q < w; ++q) {
    for (int64_t i = 0; i < block; ++i) EXPECT_EQ(buf[q * stride + i], static_cast<float>(100 * q + i));
    for (int64_t i = block; i < stride; ++i) EXPECT_EQ(buf[q * stride + i], q == r ? -1.0f : -1.0f) << "gap untouched";
  }
}

TEST(CommunicatorTest, AsyncCollectivesCompleteInIssueOrder) {
  const int w = world().world_size();
  std::vector<std::vector<float>> bufs(8, std::vector<float>(4096, 1.0f));
  std::vector<CommHandle> handles;
  for (auto& b : bufs) handles.push_back(world().all_reduce_async(b.data(), 4096, DType::kF32, ReduceOp::kSum));
  int32_t root_value = world().rank() == 0 ? 42 : 0;
  EXPECT_TRUE(world().broadcast(&root_value, 1, DType::kI32, 0).ok());
  EXPECT_EQ(root_value, 42);
  // The broadcast was issued last and has finished, so every earlier one has.
  for (const CommHandle& h : handles) EXPECT_TRUE(h->done());
  for (const CommHandle& h : handles) EXPECT_TRUE(h->wait().ok());
  for (auto& b : bufs) EXPECT_EQ(b[4095], static_cast<float>(w));
  EXPECT_TRUE(world().barrier().ok());
}

// ---- all-to-all

// What rank `src` sends rank `dst` as its element i (i < 10): distinct for
// every (src, dst, i), so a block delivered to the wrong place shows.
int sent_value(int src, int dst, int64_t i) { return src * 1000 + dst * 10 + static_cast<int>(i); }

// An element of T holding v. bf16 is the bit pattern v: the exchange moves
// bits, and as bf16 values 1000 and 1001 would round to the same number.
template <typename T>
T element(int v) {
  return static_cast<T>(v);
}

constexpr int kUntouched = -7;  // gaps and not-yet-received elements

template <typename T>
void expect_all_to_all(Communicator& c, DType dtype) {
  const int w = c.world_size(), r = c.rank();
  const int64_t count = 7;
  std::vector<T> send(static_cast<size_t>(w * count)), recv(send.size(), element<T>(kUntouched));
  for (int q = 0; q < w; ++q) {
    for (int64_t i = 0; i < count; ++i) send[q * count + i] = element<T>(sent_value(r, q, i));
  }
  const std::vector<T> sent = send;
  const int64_t bytes_before = c.bytes_communicated();
  EXPECT_TRUE(c.all_to_all(send.data(), recv.data(), count, dtype).ok());
  for (int q = 0; q < w; ++q) {
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(recv[q * count + i], element<T>(sent_value(q, r, i))) << "from rank " << q << ", element " << i;
    }
  }
  EXPECT_EQ(send, sent) << "the send buffer is left as it was";
  EXPECT_EQ(c.bytes_communicated() - bytes_before,
            (w - 1) * count * static_cast<int64_t>(dtype_size(dtype)))
      << "the blocks sent to the other ranks";
}

// Elements rank src sends rank dst: 0, 3 or 6, so some peers get nothing
// (on 2 ranks rank 0 sends rank 1 nothing; on 4, every rank has an empty
// part with some peer).
int64_t part(int src, int dst) { return 3 * ((src + 2 * dst + 1) % 3); }

template <typename T>
void expect_all_to_all_v(Communicator& c, DType dtype) {
  const int w = c.world_size(), r = c.rank();
  // Send parts in reverse rank order, each after a gap of 2 elements.
  std::vector<int64_t> send_counts(w), send_displs(w), recv_counts(w), recv_displs(w);
  int64_t end = 0;
  for (int q = w - 1; q >= 0; --q) {
    send_counts[q] = part(r, q);
    send_displs[q] = end + 2;
    end = send_displs[q] + send_counts[q];
  }
  std::vector<T> send(static_cast<size_t>(end), element<T>(kUntouched));
  for (int q = 0; q < w; ++q) {
    for (int64_t i = 0; i < send_counts[q]; ++i) send[send_displs[q] + i] = element<T>(sent_value(r, q, i));
  }
  // Receive parts in rank order, part q after a gap of q + 1 elements, and
  // 3 more at the end.
  end = 0;
  for (int q = 0; q < w; ++q) {
    recv_counts[q] = part(q, r);
    recv_displs[q] = end + q + 1;
    end = recv_displs[q] + recv_counts[q];
  }
  std::vector<T> recv(static_cast<size_t>(end + 3), element<T>(kUntouched));
  const int64_t bytes_before = c.bytes_communicated();
  EXPECT_TRUE(c.all_to_all_v(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs, dtype).ok());
  std::vector<T> want(recv.size(), element<T>(kUntouched));
  for (int q = 0; q < w; ++q) {
    for (int64_t i = 0; i < recv_counts[q]; ++i) want[recv_displs[q] + i] = element<T>(sent_value(q, r, i));
  }
  for (size_t k = 0; k < recv.size(); ++k) EXPECT_EQ(recv[k], want[k]) << "element " << k << " of the receive buffer";
  int64_t to_others = 0;
  for (int q = 0; q < w; ++q) to_others += q == r ? 0 : send_counts[q];
  EXPECT_EQ(c.bytes_communicated() - bytes_before, to_others * static_cast<int64_t>(dtype_size(dtype)));
}

TEST(CommunicatorTest, AllToAllDeliversEveryRanksBlockInRankOrder) {
  expect_all_to_all<float>(world(), DType::kF32);
  expect_all_to_all<uint16_t>(world(), DType::kBF16);
  expect_all_to_all<int32_t>(world(), DType::kI32);
}

TEST(CommunicatorTest, AllToAllVWithUnevenAndEmptyPartsAndGaps) {
  expect_all_to_all_v<float>(world(), DType::kF32);
  expect_all_to_all_v<uint16_t>(world(), DType::kBF16);
  expect_all_to_all_v<int32_t>(world(), DType::kI32);
  // Nothing at all to anyone: completes, touching nothing.
  const int w = world().world_size();
  const std::vector<int64_t> zeros(w, 0);
  float untouched = 5.0f;
  EXPECT_TRUE(world().all_to_all_v(nullptr, zeros, zeros, &untouched, zeros, zeros, DType::kF32).ok());
  EXPECT_EQ(untouched, 5.0f);
}

TEST(CommunicatorTest, AllToAllAsyncCompletesInIssueOrderWithTheOtherCollectives) {
  const int w = world().world_size(), r = world().rank();
  const int64_t count = 4096;
  std::vector<float> send(static_cast<size_t>(w * count)), recv(send.size(), 0.0f), sum(count, 1.0f);
  for (int q = 0; q < w; ++q) std::fill_n(send.begin() + q * count, count, static_cast<float>(sent_value(r, q, 0)));
  CommHandle a2a = world().all_to_all_async(send.data(), recv.data(), count, DType::kF32);
  EXPECT_TRUE(world().all_reduce(sum.data(), count, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_TRUE(a2a->done()) << "issued before the all-reduce that has finished";
  EXPECT_TRUE(a2a->wait().ok());
  for (int q = 0; q < w; ++q) EXPECT_EQ(recv[q * count + count - 1], static_cast<float>(sent_value(q, r, 0)));
  EXPECT_EQ(sum[0], static_cast<float>(w));
}

// A world of one rank: the local communicator (no launcher) and a one-rank
// MPI group copy send into recv.
TEST(CommunicatorTest, AllToAllOnOneRankCopies) {
  std::unique_ptr<Communicator> local = make_local_communicator();
  absl::StatusOr<std::unique_ptr<Communicator>> alone = world().split(world().rank(), 0);
  ASSERT_TRUE(alone.ok()) << alone.status();
  for (Communicator* c : {local.get(), alone->get()}) {
    SCOPED_TRACE(c->name());
    ASSERT_EQ(c->world_size(), 1);
    expect_all_to_all<float>(*c, DType::kF32);
    expect_all_to_all<uint16_t>(*c, DType::kBF16);
    expect_all_to_all<int32_t>(*c, DType::kI32);
    expect_all_to_all_v<float>(*c, DType::kF32);
    expect_all_to_all_v<int32_t>(*c, DType::kI32);
    EXPECT_EQ(c->bytes_communicated(), 0) << "nothing leaves a one-rank world";
  }
}

// MPI 3's counts are int: larger ones fail the call by name on every rank
// that passes them, before anything is sent (no buffer is touched).
TEST(CommunicatorTest, AllToAllCountsBeyondMpiIntAreRefusedByName) {
  if (world().name() != "mpi") GTEST_SKIP() << "the limit is MPI's";
  const int w = world().world_size();
  const int64_t too_many = int64_t{INT_MAX} + 1;
  absl::Status s = world().all_to_all(nullptr, nullptr, too_many, DType::kF32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("all_to_all: a block of 2147483648 elements"), std::string::npos) << s;
  std::vector<int64_t> zeros(w, 0), far(w, 0);
  far[w - 1] = too_many;
  s = world().all_to_all_v(nullptr, zeros, zeros, nullptr, zeros, far, DType::kF32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("receive displacement for rank " + std::to_string(w - 1)), std::string::npos) << s;
  EXPECT_TRUE(world().barrier().ok()) << "the ranks are still in step";
}

// The planner's dry run moves nothing and counts what a real rank would send.
TEST(CommunicatorTest, DryRunAllToAllCountsTheBytesSentToOtherRanks) {
  std::unique_ptr<Communicator> dry = make_dry_run_communicator(/*rank=*/1, /*world=*/4);
  EXPECT_TRUE(dry->all_to_all(nullptr, nullptr, 5, DType::kF32).ok());
  EXPECT_EQ(dry->bytes_communicated(), 3 * 5 * 4);
  // Rank 1's own part (7) stays here.
  EXPECT_TRUE(dry->all_to_all_v(nullptr, {2, 7, 0, 4}, {0, 2, 9, 9}, nullptr, {1, 7, 3, 0}, {0, 1, 8, 11},
                                DType::kBF16)
                  .ok());
  EXPECT_EQ(dry->bytes_communicated(), 60 + (2 + 0 + 4) * 2);
}

}  // namespace
}  // namespace zero
