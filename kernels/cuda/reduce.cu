// Reductions: column sums into a parameter gradient (bias, positional table),
// the sum of squares behind the global gradient norm, and the inf/NaN count
// behind the fp16 overflow check.
//
// sum_squares is accumulated in double from the first element (each square is
// formed in double), in two deterministic passes: a fixed number of blocks,
// chosen from n alone, each reduce a grid-stride slice into one double; one
// block then adds those partials. count_nonfinite is exact integer counting,
// so its per-block atomicAdd is deterministic too.
#include <cmath>

#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace zero::cuda {

namespace {

// Blocks of the first sum_squares pass (and the number of partials).
constexpr int64_t kSumSquaresMaxBlocks = 1024;
constexpr int kSumSquaresItemsPerThread = 8;

struct PlainColumns {
  const float* x;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1]) const {
    acc[0] += x[r * cols + c];
  }
};

unsigned sum_squares_blocks(int64_t n) {
  int64_t blocks = (n + int64_t{kBlockThreads} * kSumSquaresItemsPerThread - 1) /
                   (int64_t{kBlockThreads} * kSumSquaresItemsPerThread);
  if (blocks < 1) blocks = 1;
  if (blocks > kSumSquaresMaxBlocks) blocks = kSumSquaresMaxBlocks;
  return static_cast<unsigned>(blocks);
}

template <DType T>
__global__ void sum_squares_partial_kernel(const void* __restrict__ x, int64_t n,
                                           double* __restrict__ partial) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = load_elem<T>(x, i);
    acc = fma(v, v, acc);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* __restrict__ partial, int64_t count,
                                    double* __restrict__ result) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *result = acc;
}

template <DType T>
__global__ void count_nonfinite_kernel(const void* __restrict__ x, int64_t n,
                                       unsigned long long* __restrict__ result) {
  __shared__ unsigned long long scratch[32];
  unsigned long long count = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    // Widening to fp32 keeps inf and NaN, so one test serves every dtype.
    count += isfinite(load_elem<T>(x, i)) ? 0u : 1u;
  }
  count = block_sum(count, scratch);
  if (threadIdx.x == 0 && count != 0) atomicAdd(result, count);
}

}  // namespace

size_t column_sums_workspace_bytes(int64_t rows, int64_t cols) {
  return column_partials_bytes(1, rows, cols);
}

void launch_column_sums_accumulate(const float* x, int64_t rows, int64_t cols, void* dst,
                                   DType dst_dtype, void* workspace, cudaStream_t stream) {
  ColumnDsts<1> dsts;
  dsts.ptr[0] = dst;
  dsts.dtype[0] = dst_dtype;
  run_column_sums<1>(PlainColumns{x, cols}, rows, cols, dsts, static_cast<float*>(workspace),
                     stream);
}

size_t sum_squares_workspace_bytes() { return kSumSquaresMaxBlocks * sizeof(double); }

void launch_sum_squares(const void* x, DType dtype, int64_t n, double* result, void* workspace,
                        cudaStream_t stream) {
  if (n == 0) {
    ZE_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream));
    return;
  }
  const unsigned blocks = sum_squares_blocks(n);
  auto* partial = static_cast<double*>(workspace);
  with_float_dtype(dtype, [&](auto tag) {
    sum_squares_partial_kernel<decltype(tag)::value>
        <<<blocks, kBlockThreads, 0, stream>>>(x, n, partial);
  });
  ZE_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kBlockThreads, 0, stream>>>(partial, blocks, result);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_count_nonfinite(const void* x, DType dtype, int64_t n, unsigned long long* result,
                            cudaStream_t stream) {
  ZE_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(unsigned long long), stream));
  if (n == 0) return;
  with_float_dtype(dtype, [&](auto tag) {
    count_nonfinite_kernel<decltype(tag)::value>
        <<<grid_blocks(n), kBlockThreads, 0, stream>>>(x, n, result);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
