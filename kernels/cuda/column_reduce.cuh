// Deterministic column sums, the shape of every parameter-gradient reduction
// here (bias, positional table, layer-norm gamma and beta):
//   dst_k[c] += sum_r f_k(r, c)   for k < K, over rows r of a [rows, cols] grid.
//
// No atomics, so the bits never depend on scheduling:
//  * up to kColChunkRows rows (e.g. the batch dimension of the positional
//    gradient): one thread per column adds the rows in order, then adds the
//    sum into dst -- the CPU kernel's order exactly, and no workspace;
//  * more rows: column_partials, one block (32 columns x 8 row lanes) per
//    (column tile, chunk of kColChunkRows rows); lane y sums rows y, y+8, ...
//    and the lane sums are added in lane order into partial[k][chunk][c];
//    then column_finish adds the chunks in chunk order into dst.
// The plan depends only on `rows`, so results are the same on any device.
// dst is accumulated in its storage dtype with one rounding.
//
// F is a functor with `__device__ void operator()(int64_t r, int64_t c,
// float (&acc)[K]) const` that adds f_k(r, c) into acc[k]; consecutive
// threads take consecutive columns, so its reads along c are coalesced.
#pragma once

#include "kernels/cuda/device_math.cuh"

namespace zero::cuda {
namespace {

inline constexpr int kColTile = 32;
inline constexpr int kColRowLanes = 8;
inline constexpr int64_t kColChunkRows = 256;
inline constexpr int64_t kMaxGridY = 65535;

template <int K>
struct ColumnDsts {
  void* ptr[K];
  DType dtype[K];
};

struct ColumnPlan {
  int64_t chunk_rows;
  int64_t chunks;  // 1: the direct kernel, no partials
};

inline ColumnPlan column_plan(int64_t rows) {
  if (rows <= kColChunkRows) return {rows, 1};
  int64_t chunk_rows = kColChunkRows;
  if ((rows + chunk_rows - 1) / chunk_rows > kMaxGridY) chunk_rows = (rows + kMaxGridY - 1) / kMaxGridY;
  return {chunk_rows, (rows + chunk_rows - 1) / chunk_rows};
}

// Workspace bytes of partial sums for K outputs (0 when the direct kernel serves).
inline size_t column_partials_bytes(int k, int64_t rows, int64_t cols) {
  const ColumnPlan plan = column_plan(rows);
  if (plan.chunks == 1) return 0;
  return static_cast<size_t>(k) * static_cast<size_t>(plan.chunks) * static_cast<size_t>(cols) *
         sizeof(float);
}

template <int K, class F>
__global__ void column_direct_kernel(F f, int64_t rows, int64_t cols, ColumnDsts<K> dst) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    float acc[K];
    for (int k = 0; k < K; ++k) acc[k] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) f(r, c, acc);
    for (int k = 0; k < K; ++k) {
      store_any(dst.ptr[k], dst.dtype[k], c, load_any(dst.ptr[k], dst.dtype[k], c) + acc[k]);
    }
  }
}

template <int K, class F>
__global__ void column_partials_kernel(F f, int64_t rows, int64_t cols, int64_t chunk_rows,
                                       float* __restrict__ partial) {
  __shared__ float lane_sums[K][kColRowLanes][kColTile];
  const int64_t c = blockIdx.x * int64_t{kColTile} + threadIdx.x;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRowLanes) f(r, c, acc);
  }
  for (int k = 0; k < K; ++k) lane_sums[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int y = 0; y < kColRowLanes; ++y) s += lane_sums[k][y][threadIdx.x];
      partial[(k * int64_t{gridDim.y} + blockIdx.y) * cols + c] = s;
    }
  }
}

template <int K>
__global__ void column_finish_kernel(const float* __restrict__ partial, int64_t chunks,
                                     int64_t cols, ColumnDsts<K> dst) {
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols;
       c += int64_t{gridDim.x} * blockDim.x) {
    for (int k = 0; k < K; ++k) {
      const float* part = partial + k * chunks * cols;
      float s = 0.0f;
      for (int64_t j = 0; j < chunks; ++j) s += part[j * cols + c];
      store_any(dst.ptr[k], dst.dtype[k], c, load_any(dst.ptr[k], dst.dtype[k], c) + s);
    }
  }
}

// dst.ptr[k] += column sums of f_k. `partial`: column_partials_bytes(K, rows,
// cols) bytes of device workspace (may be null when that is 0).
template <int K, class F>
void run_column_sums(const F& f, int64_t rows, int64_t cols, const ColumnDsts<K>& dst,
                     float* partial, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const ColumnPlan plan = column_plan(rows);
  if (plan.chunks == 1) {
    column_direct_kernel<K, F><<<grid_blocks(cols), kBlockThreads, 0, stream>>>(f, rows, cols, dst);
    ZE_CUDA_CHECK_LAUNCH();
    return;
  }
  ZE_CHECK(partial != nullptr);
  const int64_t tiles = (cols + kColTile - 1) / kColTile;
  ZE_CHECK_LE(tiles, int64_t{0x7fffffff});
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(plan.chunks));
  column_partials_kernel<K, F><<<grid, dim3(kColTile, kColRowLanes), 0, stream>>>(
      f, rows, cols, plan.chunk_rows, partial);
  ZE_CUDA_CHECK_LAUNCH();
  column_finish_kernel<K><<<grid_blocks(cols), kBlockThreads, 0, stream>>>(partial, plan.chunks,
                                                                           cols, dst);
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace zero::cuda
