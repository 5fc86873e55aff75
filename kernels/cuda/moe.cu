// The mixture-of-experts kernels (kernels/ops.h's moe_* ops, gather_rows,
// scatter_add_rows and the sigmoid gate), in the CPU backend's arithmetic
// (kernels/cpu/moe_ops.cc): one thread per router row, running
// kernels/moe_router.h's row functions (E and k are small),
// one thread per element for the row copies, one warp per row where a row
// is reduced (the combine's dweights, the gate's dg).
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/moe_router.h"

namespace zero::cuda {

namespace {

__global__ void router_forward_kernel(const float* __restrict__ logits, int64_t n, int64_t e, int64_t k,
                                      bool renormalize, float* __restrict__ probs, int32_t* __restrict__ indices,
                                      float* __restrict__ weights, float* __restrict__ lse) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r < n) {
    moe_router_row_forward(logits + r * e, e, k, renormalize, probs + r * e, indices + r * k, weights + r * k, lse + r);
  }
}

__global__ void router_backward_kernel(const float* __restrict__ probs, const int32_t* __restrict__ indices,
                                       const float* __restrict__ dweights, int64_t n, int64_t e, int64_t k,
                                       bool renormalize, const float* __restrict__ extra, float z_scale,
                                       const float* __restrict__ lse, float* __restrict__ dlogits) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r < n) {
    moe_router_row_backward(probs + r * e, indices + r * k, dweights + r * k, e, k, renormalize, extra, z_scale, lse[r],
                            dlogits + r * e);
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int64_t m,
                                   int64_t c, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * c; i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t r = rows[i / c];
    out[i] = r < 0 ? 0.0f : x[r * c + i % c];
  }
}

__global__ void scatter_add_rows_kernel(const float* __restrict__ dy, const int32_t* __restrict__ rows, int64_t m,
                                        int64_t c, float* __restrict__ dx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * c; i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t r = rows[i / c];
    if (r >= 0) dx[r * c + i % c] += dy[i];
  }
}

__global__ void combine_kernel(const float* __restrict__ h, const int32_t* __restrict__ rows,
                               const int32_t* __restrict__ slots, const float* __restrict__ weights, int64_t m,
                               int64_t c, float* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * c; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / c;
    const int32_t r = rows[row];
    if (r >= 0) y[r * c + i % c] += weights[slots[row]] * h[i];
  }
}

// One warp per row of h: dh = w dy[row], dweights[slot] = <dy[row], h>.
__global__ void combine_backward_kernel(const float* __restrict__ dy, const float* __restrict__ h,
                                        const int32_t* __restrict__ rows, const int32_t* __restrict__ slots,
                                        const float* __restrict__ weights, int64_t m, int64_t c,
                                        float* __restrict__ dh, float* __restrict__ dweights) {
  const int64_t i = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= m) return;
  const int32_t r = rows[i];
  float* d = dh + i * c;
  if (r < 0) {
    for (int64_t j = lane; j < c; j += 32) d[j] = 0.0f;
    return;
  }
  const float* g = dy + r * c;
  const float* hs = h + i * c;
  const float w = weights[slots[i]];
  double dot = 0;
  for (int64_t j = lane; j < c; j += 32) {
    dot += static_cast<double>(g[j]) * hs[j];
    d[j] = w * g[j];
  }
  for (int off = 16; off > 0; off /= 2) dot += __shfl_down_sync(0xffffffffu, dot, off);
  if (lane == 0) dweights[slots[i]] = static_cast<float>(dot);
}

__global__ void sigmoid_gate_forward_kernel(const float* __restrict__ g, const float* __restrict__ x, int64_t n,
                                            int64_t c, float* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * c; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = x[i] / (1.0f + expf(-g[i / c]));
  }
}

__global__ void sigmoid_gate_backward_kernel(const float* __restrict__ g, const float* __restrict__ x,
                                             const float* __restrict__ dy, int64_t n, int64_t c,
                                             float* __restrict__ dg, float* __restrict__ dx) {
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  const float s = 1.0f / (1.0f + expf(-g[r]));
  double dot = 0;
  for (int64_t j = lane; j < c; j += 32) {
    dot += static_cast<double>(dy[r * c + j]) * x[r * c + j];
    dx[r * c + j] = s * dy[r * c + j];
  }
  for (int off = 16; off > 0; off /= 2) dot += __shfl_down_sync(0xffffffffu, dot, off);
  if (lane == 0) dg[r] = static_cast<float>(dot) * s * (1.0f - s);
}

}  // namespace

void launch_moe_router_forward(const float* logits, int64_t n, int64_t e, int64_t k, bool renormalize, float* probs,
                               int32_t* indices, float* weights, float* lse, cudaStream_t stream) {
  if (n == 0) return;
  router_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(logits, n, e, k, renormalize, probs, indices,
                                                                      weights, lse);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_moe_router_backward(const float* probs, const int32_t* indices, const float* dweights, int64_t n,
                                int64_t e, int64_t k, bool renormalize, const float* extra, float z_scale,
                                const float* lse, float* dlogits, cudaStream_t stream) {
  if (n == 0) return;
  router_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(probs, indices, dweights, n, e, k,
                                                                       renormalize, extra, z_scale, lse, dlogits);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t c, float* out, cudaStream_t stream) {
  if (m * c == 0) return;
  gather_rows_kernel<<<grid_blocks(m * c), kBlockThreads, 0, stream>>>(x, rows, m, c, out);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_scatter_add_rows(const float* dy, const int32_t* rows, int64_t m, int64_t c, float* dx,
                             cudaStream_t stream) {
  if (m * c == 0) return;
  scatter_add_rows_kernel<<<grid_blocks(m * c), kBlockThreads, 0, stream>>>(dy, rows, m, c, dx);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_moe_combine(const float* h, const int32_t* rows, const int32_t* slots, const float* weights, int64_t m,
                        int64_t c, float* y, cudaStream_t stream) {
  if (m * c == 0) return;
  combine_kernel<<<grid_blocks(m * c), kBlockThreads, 0, stream>>>(h, rows, slots, weights, m, c, y);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_moe_combine_backward(const float* dy, const float* h, const int32_t* rows, const int32_t* slots,
                                 const float* weights, int64_t m, int64_t c, float* dh, float* dweights,
                                 cudaStream_t stream) {
  if (m == 0) return;
  const unsigned blocks = static_cast<unsigned>((m + kRowsPerBlock - 1) / kRowsPerBlock);
  combine_backward_kernel<<<blocks, kBlockThreads, 0, stream>>>(dy, h, rows, slots, weights, m, c, dh, dweights);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_sigmoid_gate_forward(const float* g, const float* x, int64_t n, int64_t c, float* y, cudaStream_t stream) {
  if (n * c == 0) return;
  sigmoid_gate_forward_kernel<<<grid_blocks(n * c), kBlockThreads, 0, stream>>>(g, x, n, c, y);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_sigmoid_gate_backward(const float* g, const float* x, const float* dy, int64_t n, int64_t c, float* dg,
                                  float* dx, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
  sigmoid_gate_backward_kernel<<<blocks, kBlockThreads, 0, stream>>>(g, x, dy, n, c, dg, dx);
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
