// The attention glue: causal row softmax (forward and backward) and the
// layout shuffles around the batched score GEMMs (split_qkv, merge_qkv,
// transpose12).
//
// Softmax: one warp per row of scores [BH, T, T]; row t reads and computes
// only its first t + 1 entries and writes zeros after them. Each lane touches
// the same indices in every pass, so probs may alias scores (and dscores
// dprobs): no __restrict__ on those pointers.
//
// Shuffles: every one moves whole head_dim-long runs of floats, so each warp
// copies one run (lanes along d, coalesced on both sides) and does the index
// arithmetic once per run rather than per element.
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"

namespace zero::cuda {

namespace {

constexpr int kWarpsPerBlock = kBlockThreads / 32;

unsigned warp_blocks(int64_t rows) {
  int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > kMaxGridBlocks * 8) blocks = kMaxGridBlocks * 8;  // grid-stride beyond
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

__device__ __forceinline__ int64_t global_warp() {
  return blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t total_warps() { return int64_t{gridDim.x} * kWarpsPerBlock; }

__global__ void causal_softmax_forward_kernel(const float* scores, float* probs, int64_t rows,
                                              int64_t seq) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = global_warp(); r < rows; r += total_warps()) {
    const int64_t n = r % seq + 1;
    const float* x = scores + r * seq;
    float* p = probs + r * seq;
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += 32) m = fmaxf(m, x[j]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t j = lane; j < n; j += 32) {
      const float e = expf(x[j] - m);
      p[j] = e;
      sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t j = lane; j < n; j += 32) p[j] *= inv;
    for (int64_t j = n + lane; j < seq; j += 32) p[j] = 0.0f;
  }
}

__global__ void causal_softmax_backward_kernel(const float* probs, const float* dprobs,
                                               float* dscores, int64_t rows, int64_t seq) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = global_warp(); r < rows; r += total_warps()) {
    const int64_t n = r % seq + 1;
    const float* p = probs + r * seq;
    const float* dp = dprobs + r * seq;
    float* ds = dscores + r * seq;
    float dot = 0.0f;
    for (int64_t j = lane; j < n; j += 32) dot = fmaf(p[j], dp[j], dot);
    dot = warp_sum(dot);
    for (int64_t j = lane; j < n; j += 32) ds[j] = p[j] * (dp[j] - dot);
    for (int64_t j = n + lane; j < seq; j += 32) ds[j] = 0.0f;
  }
}

__device__ __forceinline__ void copy_run(const float* __restrict__ src, float* __restrict__ dst,
                                         int64_t len, int lane) {
  for (int64_t i = lane; i < len; i += 32) dst[i] = src[i];
}

// Run s of qkv [B, T, H + 2 G, D] <-> run ((b*n + h)*T + t) of q [B, H, T, D]
// (n = H) or k, v [B, G, T, D] (n = G).
struct QkvRun {
  int64_t b, t, part, h, n;
};
__device__ __forceinline__ QkvRun qkv_run(int64_t s, int64_t seq, int64_t heads, int64_t kv_heads) {
  QkvRun r;
  const int64_t per_token = heads + 2 * kv_heads;
  int64_t j = s % per_token;
  s /= per_token;
  r.t = s % seq;
  r.b = s / seq;
  r.part = j < heads ? 0 : (j < heads + kv_heads ? 1 : 2);
  r.n = r.part == 0 ? heads : kv_heads;
  r.h = r.part == 0 ? j : (r.part == 1 ? j - heads : j - heads - kv_heads);
  return r;
}

__global__ void split_qkv_kernel(const float* __restrict__ qkv, float* q, float* k, float* v,
                                 int64_t runs, int64_t seq, int64_t heads, int64_t kv_heads,
                                 int64_t head_dim) {
  const int lane = threadIdx.x & 31;
  for (int64_t s = global_warp(); s < runs; s += total_warps()) {
    const QkvRun r = qkv_run(s, seq, heads, kv_heads);
    float* out = r.part == 0 ? q : (r.part == 1 ? k : v);
    copy_run(qkv + s * head_dim, out + ((r.b * r.n + r.h) * seq + r.t) * head_dim, head_dim, lane);
  }
}

__global__ void merge_qkv_kernel(const float* dq, const float* dk, const float* dv,
                                 float* __restrict__ dqkv, int64_t runs, int64_t seq,
                                 int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int lane = threadIdx.x & 31;
  for (int64_t s = global_warp(); s < runs; s += total_warps()) {
    const QkvRun r = qkv_run(s, seq, heads, kv_heads);
    const float* in = r.part == 0 ? dq : (r.part == 1 ? dk : dv);
    copy_run(in + ((r.b * r.n + r.h) * seq + r.t) * head_dim, dqkv + s * head_dim, head_dim, lane);
  }
}

// src [A, B, C, D] run s = (a, b, c) -> dst [A, C, B, D] run (a, c, b).
__global__ void transpose12_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                   int64_t runs, int64_t dim_b, int64_t dim_c, int64_t dim_d) {
  const int lane = threadIdx.x & 31;
  for (int64_t s = global_warp(); s < runs; s += total_warps()) {
    const int64_t c = s % dim_c;
    const int64_t ab = s / dim_c;
    const int64_t b = ab % dim_b;
    const int64_t a = ab / dim_b;
    copy_run(src + s * dim_d, dst + ((a * dim_c + c) * dim_b + b) * dim_d, dim_d, lane);
  }
}

}  // namespace

void launch_causal_softmax_forward(const float* scores, float* probs, int64_t bh, int64_t seq,
                                   cudaStream_t stream) {
  const int64_t rows = bh * seq;
  if (rows == 0) return;
  causal_softmax_forward_kernel<<<warp_blocks(rows), kBlockThreads, 0, stream>>>(scores, probs,
                                                                                rows, seq);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_causal_softmax_backward(const float* probs, const float* dprobs, float* dscores,
                                    int64_t bh, int64_t seq, cudaStream_t stream) {
  const int64_t rows = bh * seq;
  if (rows == 0) return;
  causal_softmax_backward_kernel<<<warp_blocks(rows), kBlockThreads, 0, stream>>>(
      probs, dprobs, dscores, rows, seq);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
                      int64_t heads, int64_t kv_heads, int64_t head_dim, cudaStream_t stream) {
  const int64_t runs = batch * seq * (heads + 2 * kv_heads);
  if (runs == 0 || head_dim == 0) return;
  split_qkv_kernel<<<warp_blocks(runs), kBlockThreads, 0, stream>>>(qkv, q, k, v, runs, seq, heads,
                                                                   kv_heads, head_dim);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv,
                      int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      cudaStream_t stream) {
  const int64_t runs = batch * seq * (heads + 2 * kv_heads);
  if (runs == 0 || head_dim == 0) return;
  merge_qkv_kernel<<<warp_blocks(runs), kBlockThreads, 0, stream>>>(dq, dk, dv, dqkv, runs, seq,
                                                                   heads, kv_heads, head_dim);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_transpose12(const float* src, float* dst, int64_t a, int64_t b, int64_t c, int64_t d,
                        cudaStream_t stream) {
  const int64_t runs = a * b * c;
  if (runs == 0 || d == 0) return;
  transpose12_kernel<<<warp_blocks(runs), kBlockThreads, 0, stream>>>(src, dst, runs, b, c, d);
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
