// Elementwise kernels: add, accumulate, scale, fill, cast, dropout and the
// GEMM bias broadcast. Grid-stride loops over flat element indices, one element per
// thread per iteration; each is memory bound and does one read (or two) and
// one write per element, the same arithmetic as kernels/cpu/elementwise_impl.h
// (an fp32 add or multiply, then one rounding into the storage dtype).
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/dropout_mask.h"

namespace zero::cuda {

namespace {

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  // No __restrict__: out may alias a or b (each element is read before it is written).
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

// No __restrict__: an fp32 dst may be src itself (x += x).
template <DType T>
__global__ void accumulate_kernel(void* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_elem<T>(dst, i, load_elem<T>(dst, i) + src[i]);
  }
}

template <DType T>
__global__ void scale_kernel(void* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_elem<T>(x, i, load_elem<T>(x, i) * s);
  }
}

template <DType T>
__global__ void fill_kernel(void* x, float v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_elem<T>(x, i, v);
  }
}

template <DType S, DType D>
__global__ void cast_kernel(const void* __restrict__ src, void* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store_elem<D>(dst, i, load_elem<S>(src, i));
  }
}

// dst = keep ? src * scale : 0 over [B, T, C]; the mask of dropout_mask.h,
// bit for bit the CPU kernel's. No __restrict__: dst may be src.
template <DType T>
__global__ void dropout_kernel(const void* src, void* dst, int64_t t_len, int64_t c_len, int64_t n,
                               uint64_t call_key, int64_t first_sample, int64_t first_position,
                               int64_t first_feature, uint32_t threshold, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / c_len, c = i - row * c_len;
    const int64_t b = row / t_len, t = row - b * t_len;
    const uint64_t row_key = dropout_row_key(call_key, first_sample + b);
    store_elem<T>(dst, i,
                  dropout_bits(row_key, first_position + t, first_feature + c) >= threshold
                      ? load_elem<T>(src, i) * scale
                      : 0.0f);
  }
}

template <DType B>
__global__ void add_bias_rows_kernel(float* c, int64_t rows, int64_t cols,
                                     const void* __restrict__ bias) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    c[i] += load_elem<B>(bias, i % cols);
  }
}

}  // namespace

void launch_add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_blocks(n), kBlockThreads, 0, stream>>>(a, b, out, n);
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_accumulate(void* dst, DType dst_dtype, const float* src, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return;
  with_float_dtype(dst_dtype, [&](auto tag) {
    accumulate_kernel<decltype(tag)::value><<<grid_blocks(n), kBlockThreads, 0, stream>>>(dst, src, n);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_scale(void* x, DType dtype, float s, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_float_dtype(dtype, [&](auto tag) {
    scale_kernel<decltype(tag)::value><<<grid_blocks(n), kBlockThreads, 0, stream>>>(x, s, n);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_fill(void* x, DType dtype, float v, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (v == 0.0f && !std::signbit(v)) {  // +0 is all-zero bits in every float dtype
    ZE_CUDA_CHECK(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * dtype_size(dtype), stream));
    return;
  }
  with_float_dtype(dtype, [&](auto tag) {
    fill_kernel<decltype(tag)::value><<<grid_blocks(n), kBlockThreads, 0, stream>>>(x, v, n);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                 cudaStream_t stream) {
  if (n == 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) {
      ZE_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype),
                                    cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  with_float_dtype(src_dtype, [&](auto stag) {
    with_float_dtype(dst_dtype, [&](auto dtag) {
      cast_kernel<decltype(stag)::value, decltype(dtag)::value>
          <<<grid_blocks(n), kBlockThreads, 0, stream>>>(src, dst, n);
    });
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_dropout(const void* src, void* dst, DType dtype, int64_t b, int64_t t, int64_t c, float p,
                    const DropoutKey& key, cudaStream_t stream) {
  const int64_t n = b * t * c;
  if (n == 0) return;
  const uint64_t call_key = dropout_call_key(key.seed, key.layer);
  const uint32_t threshold = dropout_threshold(p);
  const float scale = dropout_scale(p);
  with_float_dtype(dtype, [&](auto tag) {
    dropout_kernel<decltype(tag)::value><<<grid_blocks(n), kBlockThreads, 0, stream>>>(
        src, dst, t, c, n, call_key, key.first_sample, key.first_position, key.first_feature, threshold, scale);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

void launch_add_bias_rows(float* c, int64_t rows, int64_t cols, const void* bias,
                          DType bias_dtype, cudaStream_t stream) {
  if (rows * cols == 0) return;
  with_float_dtype(bias_dtype, [&](auto tag) {
    add_bias_rows_kernel<decltype(tag)::value>
        <<<grid_blocks(rows * cols), kBlockThreads, 0, stream>>>(c, rows, cols, bias);
  });
  ZE_CUDA_CHECK_LAUNCH();
}

}  // namespace zero::cuda
