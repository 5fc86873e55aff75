// Layer norm (forward and backward) and GPT-2's tanh GELU.
//
// Layer norm: one warp per row (8 rows per 256-thread block); a lane walks
// the columns lane, lane+32, ... so each warp reads its row coalesced. The
// forward takes two passes over the row (mean, then the biased variance of
// x - mean, which does not cancel the way E[x^2] - mean^2 does) and a third to
// write y; rows of a transformer (768..12288 floats) stay in L1/L2 between
// passes. rstd = 1 / sqrt(var + eps), as oneDNN computes it.
//
// Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))          (per row)
//   dgamma += sum_rows dy * xhat,  dbeta += sum_rows dy       (per column)
// The row kernel writes dx and the per-row rstd into the workspace; the
// column sums then run through column_reduce.cuh (deterministic, no atomics).
#include <cmath>

#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace zero::cuda {

namespace {

__global__ void layernorm_forward_kernel(const float* __restrict__ x, const void* gamma,
                                         DType gamma_dtype, const void* beta, DType beta_dtype,
                                         float eps, int64_t rows, int64_t cols,
                                         float* __restrict__ y, float* __restrict__ mean_out,
                                         float* __restrict__ var_out) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;
  const float inv_cols = 1.0f / static_cast<float>(cols);

  float sum = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) sum += xr[c];
  const float mean = warp_sum(sum) * inv_cols;

  float sq = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float d = xr[c] - mean;
    sq = fmaf(d, d, sq);
  }
  const float var = warp_sum(sq) * inv_cols;
  const float rstd = 1.0f / sqrtf(var + eps);

  for (int64_t c = lane; c < cols; c += 32) {
    const float xhat = (xr[c] - mean) * rstd;
    yr[c] = fmaf(xhat, load_any(gamma, gamma_dtype, c), load_any(beta, beta_dtype, c));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    var_out[row] = var;
  }
}

__global__ void layernorm_backward_dx_kernel(const float* __restrict__ dy,
                                             const float* __restrict__ x, const void* gamma,
                                             DType gamma_dtype, const float* __restrict__ mean,
                                             const float* __restrict__ var, float eps,
                                             int64_t rows, int64_t cols, float* __restrict__ dx,
                                             float* __restrict__ rstd_out) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const float* dyr = dy + row * cols;
  const float* xr = x + row * cols;
  float* dxr = dx + row * cols;
  const float mu = mean[row];
  const float rstd = 1.0f / sqrtf(var[row] + eps);
  const float inv_cols = 1.0f / static_cast<float>(cols);

  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float g = dyr[c] * load_any(gamma, gamma_dtype, c);
    sum_g += g;
    sum_g_xhat = fmaf(g, (xr[c] - mu) * rstd, sum_g_xhat);
  }
  const float mean_g = warp_sum(sum_g) * inv_cols;
  const float mean_g_xhat = warp_sum(sum_g_xhat) * inv_cols;

  for (int64_t c = lane; c < cols; c += 32) {
    const float g = dyr[c] * load_any(gamma, gamma_dtype, c);
    const float xhat = (xr[c] - mu) * rstd;
    dxr[c] = rstd * (g - mean_g - xhat * mean_g_xhat);
  }
  if (lane == 0) rstd_out[row] = rstd;
}

// acc[0] += dy * xhat (dgamma), acc[1] += dy (dbeta).
struct LayerNormParamGrads {
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[2]) const {
    const float g = dy[r * cols + c];
    acc[0] = fmaf(g, (x[r * cols + c] - mean[r]) * rstd[r], acc[0]);
    acc[1] += g;
  }
};

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// No __restrict__ in the GELU kernels: callers may run them in place.
__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    const float u = kGeluScale * fmaf(kGeluCubic * v, v * v, v);
    y[i] = 0.5f * v * (1.0f + tanhf(u));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    const float v2 = v * v;
    const float t = tanhf(kGeluScale * fmaf(kGeluCubic * v, v2, v));
    const float du_dv = kGeluScale * fmaf(3.0f * kGeluCubic, v2, 1.0f);
    const float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du_dv;
    dx[i] = dy[i] * grad;
  }
}

}  // namespace

void launch_layernorm_forward(const float* x, const void* gamma, DType gamma_dtype,
                              const void* beta, DType beta_dtype, float eps, int64_t rows,
                              int64_t cols, float* y, float* mean, float* var,
                              cudaStream_t stream) {
  if (rows == 0) return;
  layernorm_forward_kernel<<<row_blocks(rows), kBlockThreads, 0, stream>>>(
      x, gamma, gamma_dtype, beta, beta_dtype, eps, rows, cols, y, mean, var);
  ZE_CUDA_CHECK_LAUNCH();
}

// [rstd: rows floats, padded to 256 bytes | column partials]
namespace {
size_t rstd_bytes(int64_t rows) { return (static_cast<size_t>(rows) * sizeof(float) + 255) / 256 * 256; }
}  // namespace

size_t layernorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  return rstd_bytes(rows) + column_partials_bytes(2, rows, cols);
}

void launch_layernorm_backward(const float* dy, const float* x, const void* gamma,
                               DType gamma_dtype, const float* mean, const float* var, float eps,
                               int64_t rows, int64_t cols, float* dx, void* dgamma,
                               DType dgamma_dtype, void* dbeta, DType dbeta_dtype,
                               void* workspace, cudaStream_t stream) {
  if (rows == 0) return;
  float* rstd = static_cast<float*>(workspace);
  float* partial = reinterpret_cast<float*>(static_cast<char*>(workspace) + rstd_bytes(rows));
  layernorm_backward_dx_kernel<<<row_blocks(rows), kBlockThreads, 0, stream>>>(
      dy, x, gamma, gamma_dtype, mean, var, eps, rows, cols, dx, rstd);
  ZE_CUDA_CHECK_LAUNCH();
  ColumnDsts<2> dsts;
  dsts.ptr[0] = dgamma;
  dsts.dtype[0] = dgamma_dtype;
  dsts.ptr[1] = dbeta;
  dsts.dtype[1] = dbeta_dtype;
  run_column_sums<2>(LayerNormParamGrads{dy, x, mean, rstd, cols}, rows, cols, dsts, partial,
                     stream);
}

void launch_gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(x, y, n);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                          cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(x, dy, dx, n);
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
