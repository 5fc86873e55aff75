// Token and positional embeddings. Forward kernels copy (or add) one table row
// per warp, lanes along the row.
//
// embedding_backward is deterministic without atomics: a stable radix sort
// (cub) of (id, row) pairs groups the rows of each id in their original
// order; the warp at the start of each group then walks the group and adds
// dout rows into dtable[id] one after another, rounding into the table's dtype
// after each add. That is the CPU kernel's order and rounding exactly, so the
// result is bit-identical to it and to itself run after run. The cost is a
// serial walk per id and 256-column tile: an id repeated r times costs one
// warp r dependent adds per column (a very frequent token in a long batch is
// the slow case; loads are kept in flight, so it stays throughput bound).
//
// The positional gradient is a column sum over the batch (reduce.cu).
#include <cub/device/device_radix_sort.cuh>

#include <cstdio>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"

namespace zero::cuda {

namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;

unsigned warp_blocks(int64_t rows) {
  int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > kMaxGridBlocks * 8) blocks = kMaxGridBlocks * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

__device__ __forceinline__ int64_t global_warp() {
  return blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t total_warps() { return int64_t{gridDim.x} * kWarpsPerBlock; }

// A vocabulary-parallel table (sliced) holds rows [first, first + vocab):
// an id outside is another rank's. Unsliced, an id outside traps.
__device__ __forceinline__ bool in_slice(int64_t local_id, int64_t vocab) { return local_id >= 0 && local_id < vocab; }

__device__ __forceinline__ void check_id(int64_t id, int64_t vocab, int64_t row) {
  if (id < 0 || id >= vocab) {
    printf("ZeroEngine CUDA embedding: id %lld at row %lld is outside [0, %lld)\n",
           static_cast<long long>(id), static_cast<long long>(row), static_cast<long long>(vocab));
    __trap();
  }
}

// fp32 value as it reads back after a store into dtype T.
template <DType T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (T == DType::kF32) {
    return v;
  } else if constexpr (T == DType::kBF16) {
    return bf16_bits_to_float(float_to_bf16_bits(v));
  } else {
    return fp16_bits_to_float(float_to_fp16_bits(v));
  }
}

template <DType T>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ ids, int64_t n,
                                         const void* __restrict__ table, int64_t vocab,
                                         int64_t cols, float* __restrict__ out, int64_t first,
                                         bool sliced) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = global_warp(); r < n; r += total_warps()) {
    const int64_t id = ids[r] - first;
    float* o = out + r * cols;
    if (sliced && !in_slice(id, vocab)) {
      for (int64_t c = lane; c < cols; c += 32) o[c] = 0.0f;
      continue;
    }
    check_id(id, vocab, r);
    const int64_t base = id * cols;
    for (int64_t c = lane; c < cols; c += 32) o[c] = load_elem<T>(table, base + c);
  }
}

template <DType T>
__global__ void add_positional_kernel(float* __restrict__ x, int64_t rows, int64_t seq,
                                      int64_t cols, const void* __restrict__ table) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = global_warp(); r < rows; r += total_warps()) {
    const int64_t base = (r % seq) * cols;
    float* o = x + r * cols;
    for (int64_t c = lane; c < cols; c += 32) o[c] += load_elem<T>(table, base + c);
  }
}

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = static_cast<int32_t>(i);
  }
}

// Gradient tiles: each lane keeps kGradColsPerLane columns of one table row
// in registers (a 256-column tile per warp, tiles along grid.y) and keeps
// kGradRowsInFlight dout rows of loads in flight, so a long run of one id is
// bound by memory throughput rather than by one load's latency per add.
constexpr int kGradColsPerLane = 8;
constexpr int64_t kGradTileCols = 32 * kGradColsPerLane;
constexpr int kGradRowsInFlight = 4;

// sorted_ids / rows: the (id, row) pairs after a stable sort by id.
template <DType T>
__global__ void embedding_backward_kernel(const int32_t* __restrict__ sorted_ids,
                                          const int32_t* __restrict__ rows, int64_t n,
                                          const float* __restrict__ dout, int64_t cols,
                                          void* dtable, int64_t vocab, int64_t first, bool sliced) {
  const int lane = threadIdx.x & 31;
  const int64_t tile_col = blockIdx.y * kGradTileCols + lane;
  for (int64_t start = global_warp(); start < n; start += total_warps()) {
    const int32_t id = sorted_ids[start];
    if (start > 0 && sorted_ids[start - 1] == id) continue;  // not the start of its group
    const int64_t local_id = static_cast<int64_t>(id) - first;
    if (sliced && !in_slice(local_id, vocab)) continue;     // another rank's row
    check_id(local_id, vocab, rows[start]);
    // Equal ids are contiguous after the sort: find the end 32 entries at a time.
    int64_t end = start + 1;
    for (;;) {
      const int64_t j = end + lane;
      const unsigned same = __ballot_sync(kFullMask, j < n && sorted_ids[j] == id);
      end += __popc(same);
      if (same != kFullMask) break;
    }
    const int64_t base = local_id * cols;
    float acc[kGradColsPerLane];
#pragma unroll
    for (int q = 0; q < kGradColsPerLane; ++q) {
      const int64_t c = tile_col + q * 32;
      acc[q] = c < cols ? load_elem<T>(dtable, base + c) : 0.0f;
    }
    for (int64_t j = start; j < end; j += kGradRowsInFlight) {
      float g[kGradRowsInFlight][kGradColsPerLane];
#pragma unroll
      for (int u = 0; u < kGradRowsInFlight; ++u) {
        const bool in_group = j + u < end;
        const int64_t row = in_group ? rows[j + u] : 0;
#pragma unroll
        for (int q = 0; q < kGradColsPerLane; ++q) {
          const int64_t c = tile_col + q * 32;
          g[u][q] = in_group && c < cols ? dout[row * cols + c] : 0.0f;
        }
      }
      // Row order, one rounding per add (skipping, not adding 0, past the
      // group's end: -0 + 0 would turn into +0).
#pragma unroll
      for (int u = 0; u < kGradRowsInFlight; ++u) {
        if (j + u >= end) break;
#pragma unroll
        for (int q = 0; q < kGradColsPerLane; ++q) acc[q] = round_to<T>(acc[q] + g[u][q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kGradColsPerLane; ++q) {
      const int64_t c = tile_col + q * 32;
      if (c < cols) store_elem<T>(dtable, base + c, acc[q]);
    }
  }
}

// The id range a sliced table's backward sorts over: every non-negative int32.
constexpr int64_t kSlicedSortRange = int64_t{1} << 31;

int sort_end_bit(int64_t vocab) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < vocab) ++bits;
  return bits;
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t cub_sort_bytes(int64_t n, int64_t vocab) {
  size_t bytes = 0;
  ZE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<int>(n), 0, sort_end_bit(vocab)));
  return bytes;
}

}  // namespace

void launch_embedding_forward(const int32_t* ids, int64_t n, const void* table, DType table_dtype,
                              int64_t vocab, int64_t cols, float* out, int64_t first, bool sliced,
                              cudaStream_t stream) {
  if (n == 0 || cols == 0) return;
  with_float_dtype(table_dtype, [&](auto tag) {
    embedding_forward_kernel<decltype(tag)::value>
        <<<warp_blocks(n), kBlockThreads, 0, stream>>>(ids, n, table, vocab, cols, out, first, sliced);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_add_positional(float* x, int64_t batch, int64_t seq, int64_t cols, const void* table,
                           DType table_dtype, cudaStream_t stream) {
  const int64_t rows = batch * seq;
  if (rows == 0 || cols == 0) return;
  with_float_dtype(table_dtype, [&](auto tag) {
    add_positional_kernel<decltype(tag)::value>
        <<<warp_blocks(rows), kBlockThreads, 0, stream>>>(x, rows, seq, cols, table);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

// [sorted ids | rows in | rows out | cub temp], each 256-byte aligned.
size_t embedding_backward_workspace_bytes(int64_t n, int64_t vocab, bool sliced) {
  if (n == 0) return 0;
  if (sliced) vocab = kSlicedSortRange;
  ZE_CHECK_LE(n, int64_t{0x7fffffff}) << "embedding_backward takes at most 2^31 - 1 rows";
  return 3 * align256(static_cast<size_t>(n) * sizeof(int32_t)) + cub_sort_bytes(n, vocab);
}

void launch_embedding_backward(const int32_t* ids, int64_t n, const float* dout, int64_t cols,
                               void* dtable, DType dtable_dtype, int64_t vocab, int64_t first, bool sliced,
                               void* workspace, cudaStream_t stream) {
  if (n == 0 || cols == 0) return;
  // Sliced, the ids span the whole vocabulary, not the slice: sort on every
  // bit, so that each id's rows stay one contiguous group.
  const int64_t sort_range = sliced ? kSlicedSortRange : vocab;
  const size_t array_bytes = align256(static_cast<size_t>(n) * sizeof(int32_t));
  char* ws = static_cast<char*>(workspace);
  auto* sorted_ids = reinterpret_cast<int32_t*>(ws);
  auto* rows_in = reinterpret_cast<int32_t*>(ws + array_bytes);
  auto* rows_out = reinterpret_cast<int32_t*>(ws + 2 * array_bytes);
  void* temp = ws + 3 * array_bytes;
  size_t temp_bytes = cub_sort_bytes(n, sort_range);

  iota_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(rows_in, n);
  ZE_CUDA_CHECK_LAUNCH();
  ZE_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, ids, sorted_ids, rows_in,
                                                rows_out, static_cast<int>(n), 0,
                                                sort_end_bit(sort_range), stream));
  const int64_t tiles = (cols + kGradTileCols - 1) / kGradTileCols;
  ZE_CHECK_LE(tiles, int64_t{65535}) << "embedding_backward: " << cols << " columns";
  const dim3 grid(warp_blocks(n), static_cast<unsigned>(tiles));
  with_float_dtype(dtable_dtype, [&](auto tag) {
    embedding_backward_kernel<decltype(tag)::value><<<grid, kBlockThreads, 0, stream>>>(
        sorted_ids, rows_out, n, dout, cols, dtable, vocab, first, sliced);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
