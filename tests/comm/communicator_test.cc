// The MPI communicator's collectives on 1-4 ranks: results every rank can
// check against the closed form (sums of rank-dependent integers are exact in
// fp32 and bf16), uneven and empty reduce-scatter parts, strided all-gather,
// and asynchronous collectives completing in issue order.
#include <gtest/gtest.h>

#include <numeric>

#include "core/dtype.h"
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

}  // namespace
}  // namespace zero
