// The CUDA backend itself: creation and its failure modes, tracked memory per
// tier (allocated, reserved, the cache and its release), host <-> device
// copies from pageable and pinned memory, and stream / event ordering.
//
// Without a device only the failure path of create() can run; it is checked
// and the test then skips, like every other CUDA test.
#include <cuda_runtime_api.h>

#include <cstring>
#include <numeric>

#include "tests/kernels/cuda/cuda_test_util.h"

namespace zero::cuda_test {
namespace {

int64_t allocated(Tier t) {
  return MemoryTracker::global().snapshot().allocated[static_cast<int>(t)].current;
}
int64_t reserved(Tier t) {
  return MemoryTracker::global().snapshot().reserved[static_cast<int>(t)].current;
}
int64_t category(Tier t, MemCategory c) {
  return MemoryTracker::global().snapshot().at(t, c).current;
}

TEST(CudaBackendCreateTest, FailsCleanlyWithoutADeviceAndRejectsBadIndices) {
  if (!cuda_device_available()) {
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::create(0);
    ASSERT_FALSE(b.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(b.status()) || absl::IsInternal(b.status()))
        << b.status().ToString();
    EXPECT_NE(b.status().message().find("cuda"), absl::string_view::npos) << b.status().ToString();
    GTEST_SKIP() << kNoDeviceMessage << " (checked: create() fails with " << b.status().ToString()
                 << ")";
  }
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  for (int bad : {-1, count}) {
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::create(bad);
    ASSERT_FALSE(b.ok()) << "device " << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(b.status())) << b.status().ToString();
  }
  absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::create(0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "cuda:0");
  EXPECT_EQ((*b)->compute_tier(), Tier::kDevice);
}

class CudaBackendTest : public CudaVsCpuTest {};

TEST_F(CudaBackendTest, DeviceAllocationsAreTrackedAndCached) {
  gpu_->release_cached();
  const int64_t alloc0 = allocated(Tier::kDevice), reserved0 = reserved(Tier::kDevice);
  const int64_t act0 = category(Tier::kDevice, MemCategory::kActivations);
  const size_t bytes = (3u << 20) + 100;  // not a multiple of the rounding unit
  void* first = nullptr;
  {
    auto s = gpu_->allocate(bytes, Tier::kDevice, MemCategory::kActivations);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    first = (*s)->data();
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, first), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
    EXPECT_EQ(allocated(Tier::kDevice) - alloc0, static_cast<int64_t>(bytes));
    EXPECT_EQ(category(Tier::kDevice, MemCategory::kActivations) - act0, static_cast<int64_t>(bytes));
    EXPECT_GE(reserved(Tier::kDevice) - reserved0, static_cast<int64_t>(bytes));
  }
  // Freed: no longer allocated, still reserved (cached).
  EXPECT_EQ(allocated(Tier::kDevice), alloc0);
  const int64_t cached = reserved(Tier::kDevice) - reserved0;
  EXPECT_GE(cached, static_cast<int64_t>(bytes));
  // Once the compute stream has passed the release, the same size reuses the block.
  gpu_->synchronize_stream(kComputeStream);
  {
    auto s = gpu_->allocate(bytes, Tier::kDevice, MemCategory::kGradients);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->data(), first);
    EXPECT_EQ(reserved(Tier::kDevice) - reserved0, cached) << "reuse must not reserve more";
  }
  // A request up to an eighth smaller takes the cached block too (best fit),
  // and freeing it caches the whole block again.
  gpu_->synchronize_stream(kComputeStream);
  {
    auto s = gpu_->allocate(bytes - (256u << 10), Tier::kDevice, MemCategory::kActivations);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->data(), first);
    EXPECT_EQ(reserved(Tier::kDevice) - reserved0, cached);
  }
  gpu_->synchronize_stream(kComputeStream);
  {
    auto s = gpu_->allocate(bytes, Tier::kDevice, MemCategory::kActivations);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->data(), first) << "the block came back whole";
  }
  // A quarter of it does not: a block of its own.
  gpu_->synchronize_stream(kComputeStream);
  {
    auto s = gpu_->allocate(bytes / 4, Tier::kDevice, MemCategory::kActivations);
    ASSERT_TRUE(s.ok());
    EXPECT_NE((*s)->data(), first);
    EXPECT_GT(reserved(Tier::kDevice) - reserved0, cached);
  }
  gpu_->release_cached();
  EXPECT_EQ(reserved(Tier::kDevice), reserved0);
}

TEST_F(CudaBackendTest, HostTierIsPinnedAndTrackedAsHost) {
  gpu_->release_cached();
  const int64_t host_alloc0 = allocated(Tier::kHost), host_reserved0 = reserved(Tier::kHost);
  const int64_t device_alloc0 = allocated(Tier::kDevice);
  {
    auto s = gpu_->allocate(1 << 20, Tier::kHost, MemCategory::kSwapBuffers);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, (*s)->data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);  // pinned, not pageable
    EXPECT_EQ(allocated(Tier::kHost) - host_alloc0, 1 << 20);
    EXPECT_GE(reserved(Tier::kHost) - host_reserved0, 1 << 20);
    EXPECT_EQ(allocated(Tier::kDevice), device_alloc0);
  }
  gpu_->release_cached();
  EXPECT_EQ(allocated(Tier::kHost), host_alloc0);
  EXPECT_EQ(reserved(Tier::kHost), host_reserved0);
}

TEST_F(CudaBackendTest, AllocationBeyondDeviceMemoryFailsWithResourceExhausted) {
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  auto s = gpu_->allocate(total_bytes * 2, Tier::kDevice, MemCategory::kParameters);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s.status())) << s.status().ToString();
  // The failure leaves no sticky error behind: ops still run.
  Mirrored x = random(Shape{1000}, DType::kF32, 1);
  gpu_->ops().scale(x.gpu, 2.0f);
  EXPECT_EQ(values(x.gpu)[0], 2.0f * values(x.cpu)[0]);
}

TEST_F(CudaBackendTest, CopiesRoundTripBetweenTiers) {
  const int64_t n = (1 << 20) + 3;
  std::vector<float> src(static_cast<size_t>(n));
  std::iota(src.begin(), src.end(), 0.0f);
  Tensor dev = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kActivations);
  Tensor dev2 = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kActivations);
  Tensor pinned = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kSwapBuffers, Tier::kHost);
  gpu_->copy(dev.data(), src.data(), dev.nbytes());         // pageable -> device
  gpu_->copy(dev2, dev);                                     // device -> device
  gpu_->copy(pinned, dev2);                                  // device -> pinned
  EXPECT_EQ(std::memcmp(pinned.data(), src.data(), pinned.nbytes()), 0);
  std::vector<float> back(src.size(), -1.0f);
  std::memset(pinned.data(), 0, pinned.nbytes());
  gpu_->copy(pinned, dev);                                   // and back to pageable
  gpu_->copy(back.data(), pinned.data(), pinned.nbytes());
  EXPECT_EQ(back, src);
}

TEST_F(CudaBackendTest, EventsOrderWorkAcrossStreams) {
  // Compute fills a large buffer; a side stream copies it to pinned memory
  // only after waiting on the compute stream's event. Without the wait the
  // copy would race the fills.
  const int64_t n = 64 << 20;  // 256 MiB of fp32: the fills take long enough to race
  Tensor x = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kActivations);
  Tensor host = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kSwapBuffers, Tier::kHost);
  std::memset(host.data(), 0, host.nbytes());
  const StreamId side = gpu_->create_stream();
  EXPECT_NE(side, kComputeStream);
  gpu_->ops().fill(x, 1.0f);
  for (int i = 0; i < 8; ++i) gpu_->ops().scale(x, 2.0f);
  EventPtr filled = gpu_->record_event(kComputeStream);
  gpu_->wait_event(side, filled);
  gpu_->copy_async(host.data(), x.data(), x.nbytes(), side);
  EventPtr copied = gpu_->record_event(side);
  gpu_->synchronize(copied);
  EXPECT_TRUE(copied->query());
  EXPECT_TRUE(filled->query());
  const float* h = host.f32();
  for (int64_t i : {int64_t{0}, n / 2, n - 1}) EXPECT_EQ(h[i], 256.0f) << "element " << i;

  // And the other way: compute waits for an upload on the side stream.
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  std::memcpy(host.data(), ones.data(), host.nbytes());
  gpu_->copy_async(x.data(), host.data(), x.nbytes(), side);
  gpu_->wait_event(kComputeStream, gpu_->record_event(side));
  gpu_->ops().scale(x, 3.0f);
  const double sum = gpu_->ops().sum_squares(x);  // waits for the compute stream
  EXPECT_EQ(sum, 9.0 * static_cast<double>(n));
  gpu_->synchronize_stream(side);
}

TEST_F(CudaBackendTest, FreeingRightAfterLaunchIsSafe) {
  // Engine code drops temporaries right after the ops that read them; the
  // allocator must not hand their memory to a new tensor until the compute
  // stream is past those ops, even when the new tensor is written on another stream.
  const int64_t n = 16 << 20;
  const StreamId side = gpu_->create_stream();
  Tensor out = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kActivations);
  std::vector<float> twos(static_cast<size_t>(n), 2.0f);
  Tensor pinned = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kSwapBuffers, Tier::kHost);
  std::memcpy(pinned.data(), twos.data(), pinned.nbytes());
  {
    Tensor tmp = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kActivations);
    gpu_->ops().fill(tmp, 1.0f);
    for (int i = 0; i < 8; ++i) gpu_->ops().scale(tmp, 1.0f);
    gpu_->ops().add(tmp, tmp, out);  // out = 2, reads tmp
  }                                   // tmp freed while the ops may still run
  Tensor next = gpu_->empty(Shape{n}, DType::kF32, MemCategory::kActivations);
  gpu_->copy_async(next.data(), pinned.data(), next.nbytes(), side);  // no wait on compute
  gpu_->synchronize_stream(side);
  gpu_->synchronize_stream(kComputeStream);
  EXPECT_EQ(gpu_->ops().sum_squares(out), 4.0 * static_cast<double>(n));
  EXPECT_EQ(gpu_->ops().sum_squares(next), 4.0 * static_cast<double>(n));
}

}  // namespace
}  // namespace zero::cuda_test
