// Llama's ops: RMSNorm (forward and backward; Gemma's (1 + gamma) with
// gamma_offset 1), rotary position embeddings, the SwiGLU gate, Gemma's
// GeGLU gate and logit soft-capping. All arithmetic in fp32; gamma and dgamma in any float dtype.
//
// RMSNorm: one warp per row (8 rows per 256-thread block), lanes striding the
// columns lane, lane+32, ... as layer norm does (norm_activation.cu). With
// rstd = 1 / sqrt(mean(x^2) + eps), xhat = x * rstd and g = dy * gamma,
// differentiating y_j = x_j rstd gamma_j (d rstd / d x_j = -rstd^3 x_j / C):
//   dx = rstd * (g - xhat * mean(g * xhat))                    (per row)
//      = rstd * (g - x * rstd^2 * mean(g * x))
//   dgamma += sum_rows dy * xhat                              (per column)
// The operations follow the CPU kernels (kernels/cpu/llama_impl.h) and Hugging
// Face's modules in order: y = (x * rstd) * gamma, h = (g * sigmoid(g)) * up.
// The column sums run through column_reduce.cuh (deterministic, no atomics),
// BEFORE the dx kernel: they read only dy, x and rstd, and the dx kernel reads
// each row whole before writing it, so dx may even alias dy or x.
//
// RoPE: one thread per rotated pair (x[i], x[i + D/2]) of a row, grid-stride
// over rows * D/2 (consecutive threads take consecutive i, so both halves are
// read coalesced). Each block first copies inv_freq into shared memory. The
// angle is float(position) * inv_freq[i] in fp32 and sincosf is the accurate
// one (no fast math), as on the CPU. The pair is read before it is written,
// so y may alias x.
//
// SwiGLU: grid-stride elementwise; every input element is read before the
// outputs at the same index are written, so outputs may alias inputs.
#include <cmath>

#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace zero::cuda {

namespace {

// ---- RMSNorm

// No __restrict__ on x and y: the row is reduced before any of it is written,
// and each lane reads its element before writing it, so the kernel is safe in place.
__global__ void rmsnorm_forward_kernel(const float* x, const void* gamma, DType gamma_dtype, float offset, float eps,
                                       int64_t rows, int64_t cols, float* y, float* __restrict__ rstd_out) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x & 31;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  float sq = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) sq = fmaf(xr[c], xr[c], sq);
  const float mean_sq = warp_sum(sq) / static_cast<float>(cols);
  const float rstd = 1.0f / sqrtf(mean_sq + eps);

  for (int64_t c = lane; c < cols; c += 32) yr[c] = xr[c] * rstd * (load_any(gamma, gamma_dtype, c) + offset);
  if (lane == 0) rstd_out[row] = rstd;
}

// No __restrict__ on dy, x, dx: see the file comment (dx may alias either).
__global__ void rmsnorm_backward_dx_kernel(const float* dy, const float* x, const void* gamma, DType gamma_dtype,
                                           float offset, const float* __restrict__ rstd, int64_t rows,
                                           int64_t cols, float* dx) {
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const float* dyr = dy + row * cols;
  const float* xr = x + row * cols;
  float* dxr = dx + row * cols;
  const float r = rstd[row];

  float sum_gx = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    sum_gx = fmaf(dyr[c] * (load_any(gamma, gamma_dtype, c) + offset), xr[c], sum_gx);
  }
  // mean_c(g xhat) = rstd mean_c(g x)
  const float m = warp_sum(sum_gx) * r / static_cast<float>(cols);

  for (int64_t c = lane; c < cols; c += 32) {
    const float g = dyr[c] * (load_any(gamma, gamma_dtype, c) + offset);
    const float xhat = xr[c] * r;
    dxr[c] = r * (g - xhat * m);
  }
}

// acc[0] += dy * xhat (dgamma), xhat = x * rstd.
struct RmsNormGammaGrad {
  const float* dy;
  const float* x;
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1]) const {
    acc[0] = fmaf(dy[r * cols + c], x[r * cols + c] * rstd[r], acc[0]);
  }
};

// ---- RoPE

// The frequencies as a kernel argument (RopeFreqs is 1 KB, within the 4 KB
// parameter limit); each block stages the first `half` of them in shared memory.
// No __restrict__: y may be x.
__global__ void rope_kernel(const float* x, float* y, int64_t rows, int64_t seq, RopeFreqs freqs,
                            int64_t first_position, bool inverse) {
  __shared__ float inv_freq[RopeFreqs::kMaxHalf];
  const int half = freqs.half;
  for (int i = threadIdx.x; i < half; i += blockDim.x) inv_freq[i] = freqs.inv_freq[i];
  __syncthreads();

  const int64_t n = rows * half, dim = 2 * int64_t{half};
  for (int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; w < n; w += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = w / half;
    const int i = static_cast<int>(w - row * half);
    const int64_t position = first_position + row % seq;
    const float angle = static_cast<float>(position) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    if (inverse) s = -s;  // R(-p): cos(-a) = cos(a), sin(-a) = -sin(a)
    const int64_t base = row * dim + i;
    const float lo = x[base], hi = x[base + half];
    y[base] = lo * c - hi * s;
    y[base + half] = hi * c + lo * s;
  }
}

// ---- SwiGLU

// The gated kernels run over n elements of rows f wide: element i is
// column j of row r, at r in_stride + j of gate, up (and their gradients)
// and r out_stride + j of h (and dh). Flat: f = n. A fused gate/up
// projection's [rows, 2f] output: up = gate + f, in_stride 2f, out_stride f.
struct GluIndex {
  int64_t f, in_stride, out_stride;
  __device__ __forceinline__ void at(int64_t i, int64_t& in, int64_t& out) const {
    const int64_t r = i / f, j = i - r * f;
    in = r * in_stride + j;
    out = r * out_stride + j;
  }
};

// No __restrict__: h may alias gate or up.
__global__ void swiglu_forward_kernel(const float* gate, const float* up, float* h, int64_t n, GluIndex ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t a, o;
    ix.at(i, a, o);
    const float g = gate[a];
    const float silu = g * (1.0f / (1.0f + expf(-g)));  // g sigmoid(g)
    h[o] = silu * up[a];
  }
}

// No __restrict__: dgate / dup may alias gate / up (and dh); all three inputs
// at index i are read before either output at i is written.
__global__ void swiglu_backward_kernel(const float* gate, const float* up, const float* dh, float* dgate,
                                       float* dup, int64_t n, GluIndex ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t a, o;
    ix.at(i, a, o);
    const float g = gate[a], u = up[a], d = dh[o];
    const float s = 1.0f / (1.0f + expf(-g));  // sigmoid(g)
    const float silu = g * s;                  // as the forward computes it
    const float dsilu = s * (1.0f + g * (1.0f - s));
    dgate[a] = d * u * dsilu;
    dup[a] = d * silu;
  }
}

// ---- GeGLU (Gemma's gate): h = gelu_tanh(gate) * up, as torch's
// gelu(approximate="tanh"): 0.5 g (1 + tanh u), u = sqrt(2/pi) (g + 0.044715
// g^3), computed as the CPU's (kernels/cpu/llama_impl.h): g s with s =
// sigmoid(2 u), free of 1 + tanh u's cancellation where tanh u is near -1.

__device__ __forceinline__ float gelu_tanh_s(float g) {
  return 1.0f / (1.0f + expf(-2.0f * 0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

// No __restrict__: h may alias gate or up.
__global__ void geglu_forward_kernel(const float* gate, const float* up, float* h, int64_t n, GluIndex ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t a, o;
    ix.at(i, a, o);
    const float g = gate[a];
    h[o] = g * gelu_tanh_s(g) * up[a];
  }
}

// No __restrict__: as swiglu_backward_kernel. gelu'(g) = s + 2 g s (1 - s) u'.
__global__ void geglu_backward_kernel(const float* gate, const float* up, const float* dh, float* dgate,
                                      float* dup, int64_t n, GluIndex ix) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t a, o;
    ix.at(i, a, o);
    const float g = gate[a], u = up[a], d = dh[o];
    const float s = gelu_tanh_s(g);
    const float du = 2.0f * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * g * g);
    const float dgelu = s + g * s * (1.0f - s) * du;
    dgate[a] = d * u * dgelu;
    dup[a] = d * g * s;
  }
}

// ---- Logit soft-capping: y = cap tanh(x / cap); dx = dy (1 - (y / cap)^2).

// No __restrict__: y may alias x.
__global__ void softcap_forward_kernel(const float* x, float cap, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = tanhf(x[i] / cap) * cap;
  }
}

// No __restrict__: dx may alias dy.
__global__ void softcap_backward_kernel(const float* y, const float* dy, float cap, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float t = y[i] / cap;
    dx[i] = dy[i] * (1.0f - t * t);
  }
}

}  // namespace

void launch_rmsnorm_forward(const float* x, const void* gamma, DType gamma_dtype, float gamma_offset, float eps,
                            int64_t rows, int64_t cols, float* y, float* rstd, cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_forward_kernel<<<row_blocks(rows), kBlockThreads, 0, stream>>>(x, gamma, gamma_dtype, gamma_offset, eps,
                                                                         rows, cols, y, rstd);
  ZE_CUDA_CHECK_LAUNCH();
}

size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols) { return column_partials_bytes(1, rows, cols); }

void launch_rmsnorm_backward(const float* dy, const float* x, const void* gamma, DType gamma_dtype,
                             float gamma_offset, const float* rstd, int64_t rows, int64_t cols, float* dx,
                             void* dgamma, DType dgamma_dtype, void* workspace, cudaStream_t stream) {
  if (rows == 0) return;
  ColumnDsts<1> dsts;
  dsts.ptr[0] = dgamma;
  dsts.dtype[0] = dgamma_dtype;
  run_column_sums<1>(RmsNormGammaGrad{dy, x, rstd, cols}, rows, cols, dsts, static_cast<float*>(workspace),
                     stream);
  rmsnorm_backward_dx_kernel<<<row_blocks(rows), kBlockThreads, 0, stream>>>(dy, x, gamma, gamma_dtype,
                                                                             gamma_offset, rstd, rows, cols, dx);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_rope(const float* x, float* y, int64_t rows, int64_t seq, const RopeFreqs& freqs,
                 int64_t first_position, bool inverse, cudaStream_t stream) {
  if (rows == 0 || freqs.half == 0) return;
  ZE_CHECK(freqs.half > 0 && freqs.half <= RopeFreqs::kMaxHalf && seq > 0) << freqs.half << " " << seq;
  rope_kernel<<<grid_blocks(rows * freqs.half), kBlockThreads, 0, stream>>>(x, y, rows, seq, freqs,
                                                                            first_position, inverse);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_swiglu_forward(const float* gate, const float* up, float* h, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate, up, h, n, GluIndex{n, n, n});
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup,
                            int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate, up, dh, dgate, dup, n,
                                                                       GluIndex{n, n, n});
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_geglu_forward(const float* gate, const float* up, float* h, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  geglu_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate, up, h, n, GluIndex{n, n, n});
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_geglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup,
                           int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  geglu_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate, up, dh, dgate, dup, n,
                                                                      GluIndex{n, n, n});
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_glu_rows_forward(bool geglu, const float* gate_up, float* h, int64_t rows, int64_t f,
                             cudaStream_t stream) {
  const int64_t n = rows * f;
  if (n == 0) return;
  const GluIndex ix{f, 2 * f, f};
  if (geglu) {
    geglu_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate_up, gate_up + f, h, n, ix);
  } else {
    swiglu_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate_up, gate_up + f, h, n, ix);
  }
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_glu_rows_backward(bool geglu, const float* gate_up, const float* dh, float* dgate_up, int64_t rows,
                              int64_t f, cudaStream_t stream) {
  const int64_t n = rows * f;
  if (n == 0) return;
  const GluIndex ix{f, 2 * f, f};
  if (geglu) {
    geglu_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate_up, gate_up + f, dh, dgate_up,
                                                                        dgate_up + f, n, ix);
  } else {
    swiglu_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(gate_up, gate_up + f, dh, dgate_up,
                                                                         dgate_up + f, n, ix);
  }
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_softcap_forward(const float* x, float cap, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  softcap_forward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(x, cap, y, n);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_softcap_backward(const float* y, const float* dy, float cap, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  softcap_backward_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(y, dy, cap, dx, n);
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
