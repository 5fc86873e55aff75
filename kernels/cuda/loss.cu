// Fused softmax cross-entropy over the vocabulary, one block per row of
// logits [N, V]:
//   pass 1: each thread keeps an online (max, sum of exp(x - max)) over its
//           strided slice; the pairs are merged across the warp (xor shuffles)
//           and then across warps in warp order, so every thread holds the
//           same (m, s);
//   pass 2: x[j] = exp(x[j] - m) * (grad_scale / s), minus grad_scale at the
//           target, the CPU kernel's arithmetic order.
// loss = (m - x[target]) + log(s), with x[target] read before pass 2 writes.
// Two reads and one write of the row, where max / sum / write would be three
// reads. A negative target zeroes the row and the loss.
#include <cmath>
#include <cstdio>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"

namespace zero::cuda {

namespace {

constexpr int kLossThreads = 512;  // a 50k-entry vocabulary gives ~100 entries per thread

// Merges (m2, s2) into (m, s); the result does not depend on the order of the
// two pairs, so xor-shuffle partners agree bit for bit.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
  if (m2 > m) {
    s = fmaf(s, expf(m - m2), s2);
    m = m2;
  } else if (m2 != -INFINITY) {
    s = fmaf(s2, expf(m2 - m), s);
  }
}

// A negative target ignores its row: zero gradient (the row's `cols` values
// of x) and zero loss. True for such a row (the block's threads all see it).
__device__ bool ignored_row(int32_t target, float* x, int64_t cols, float* loss) {
  if (target >= 0) return false;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) x[j] = 0.0f;
  if (threadIdx.x == 0) *loss = 0.0f;
  return true;
}

__global__ void cross_entropy_kernel(float* logits, const int32_t* __restrict__ targets,
                                     int64_t vocab, float grad_scale,
                                     float* __restrict__ losses) {
  __shared__ float warp_m[32], warp_s[32];
  const int64_t row = blockIdx.x;
  float* x = logits + row * vocab;
  const int32_t target = targets[row];
  if (ignored_row(target, x, vocab, losses + row)) return;
  if (target >= vocab) {
    if (threadIdx.x == 0) {
      printf("ZeroEngine CUDA cross_entropy: target %d at row %lld is >= vocab %lld\n", target,
             static_cast<long long>(row), static_cast<long long>(vocab));
    }
    __trap();
  }
  const float x_target = x[target];

  float m = -INFINITY, s = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) merge_max_sum(m, s, x[j], 1.0f);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float m2 = __shfl_xor_sync(kFullMask, m, offset);
    const float s2 = __shfl_xor_sync(kFullMask, s, offset);
    merge_max_sum(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();  // also orders every read of x above before the writes below
  m = warp_m[0];
  s = warp_s[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) merge_max_sum(m, s, warp_m[w], warp_s[w]);

  const float scale = grad_scale / s;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    float g = expf(x[j] - m) * scale;
    if (j == target) g -= grad_scale;
    x[j] = g;
  }
  // max - x[target] first: both are large and close, so their difference is
  // exact, where log(s) + max would round a small log(s) away.
  if (threadIdx.x == 0) losses[row] = (m - x_target) + logf(s);
}

// ---- the vocabulary-parallel phases: one block per row, the block's
// reductions in warp order (deterministic).

// The block's max of v (every thread gets it).
__device__ float block_max(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = fmaxf(m, scratch[w]);
  return m;
}

// The block's sum of v (every thread gets it), summed in warp order.
__device__ float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) s += scratch[w];
  return s;
}

__global__ void row_max_kernel(const float* __restrict__ x, int64_t cols, float* __restrict__ out) {
  __shared__ float scratch[32];
  const float* row = x + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max(m, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = m;
}

__global__ void cross_entropy_slice_exp_kernel(float* logits, const int32_t* __restrict__ targets, int64_t cols,
                                               int64_t first, const float* __restrict__ max,
                                               float* __restrict__ sums) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  float* x = logits + r * cols;
  const int64_t j = static_cast<int64_t>(targets[r]) - first;
  if (threadIdx.x == 0) sums[2 * r + 1] = targets[r] >= 0 && j >= 0 && j < cols ? x[j] : 0.0f;
  __syncthreads();  // the target's logit is read before the row is overwritten
  const float m = max[r];
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float e = expf(x[c] - m);
    x[c] = e;
    s += e;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) sums[2 * r] = s;
}

__global__ void cross_entropy_slice_finish_kernel(float* probs, const int32_t* __restrict__ targets, int64_t cols,
                                                  int64_t first, const float* __restrict__ max,
                                                  const float* __restrict__ sums, float grad_scale,
                                                  float* __restrict__ losses) {
  const int64_t r = blockIdx.x;
  float* x = probs + r * cols;
  const int32_t target = targets[r];
  if (ignored_row(target, x, cols, losses + r)) return;
  const float sum = sums[2 * r], scale = grad_scale / sum;
  const int64_t j = static_cast<int64_t>(target) - first;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float g = x[c] * scale;
    if (c == j) g -= grad_scale;
    x[c] = g;
  }
  if (threadIdx.x == 0) losses[r] = (max[r] - sums[2 * r + 1]) + logf(sum);
}

// One block per row.
unsigned block_per_row(int64_t n) {
  ZE_CHECK_LE(n, int64_t{0x7fffffff}) << "vocabulary-parallel cross-entropy rows";
  return static_cast<unsigned>(n);
}

}  // namespace

void launch_cross_entropy(float* logits, const int32_t* targets, int64_t n, int64_t vocab,
                          float grad_scale, float* losses, cudaStream_t stream) {
  if (n == 0) return;
  ZE_CHECK_LE(n, int64_t{0x7fffffff}) << "cross_entropy rows";
  cross_entropy_kernel<<<static_cast<unsigned>(n), kLossThreads, 0, stream>>>(
      logits, targets, vocab, grad_scale, losses);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_row_max(const float* x, int64_t n, int64_t cols, float* max, cudaStream_t stream) {
  if (n == 0) return;
  row_max_kernel<<<block_per_row(n), kLossThreads, 0, stream>>>(x, cols, max);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_cross_entropy_slice_exp(float* logits, const int32_t* targets, int64_t n, int64_t cols, int64_t first,
                                    const float* max, float* sums, cudaStream_t stream) {
  if (n == 0) return;
  cross_entropy_slice_exp_kernel<<<block_per_row(n), kLossThreads, 0, stream>>>(logits, targets, cols, first, max,
                                                                                 sums);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_cross_entropy_slice_finish(float* probs, const int32_t* targets, int64_t n, int64_t cols,
                                       int64_t first, const float* max, const float* sums, float grad_scale,
                                       float* losses, cudaStream_t stream) {
  if (n == 0) return;
  cross_entropy_slice_finish_kernel<<<block_per_row(n), kLossThreads, 0, stream>>>(probs, targets, cols, first, max,
                                                                                    sums, grad_scale, losses);
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
