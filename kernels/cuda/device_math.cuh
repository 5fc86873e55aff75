// Device-side building blocks shared by the kernel files (*.cu): element loads
// and stores for each storage dtype, warp and block reductions, launch sizes,
// and the host-side switch from a runtime DType to a template argument.
//
// bf16 and fp16 are stored as raw 16-bit patterns, as on the CPU. fp32 -> bf16
// is integer round-to-nearest-even with NaNs kept quiet, bit for bit the
// float_to_bf16() of core/dtype.h (CUDA's __float2bfloat16_rn rounds
// the same way but returns a different NaN pattern). fp32 -> fp16 is
// __float2half_rn (IEEE round to nearest even, overflow to inf).
//
// Reductions here combine lanes in a fixed tree (xor shuffles, then warp 0
// over the per-warp results), so a kernel that uses them with a grid that
// depends only on the problem size gives the same bits on every run.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"

namespace zero::cuda {

// ---- launch sizes

inline constexpr int kBlockThreads = 256;
// Grid-stride kernels never launch more blocks than this: about 15 waves of
// 256-thread blocks on a 132-SM H100, and a fixed cap keeps reduction orders
// independent of the device.
inline constexpr int64_t kMaxGridBlocks = 8192;

// Row kernels with one warp per row (the norms): kBlockThreads / 32 rows
// per block, as many blocks as the rows need.
inline constexpr int kRowsPerBlock = kBlockThreads / 32;
inline unsigned row_blocks(int64_t rows) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  ZE_CHECK_LE(blocks, int64_t{0x7fffffff});
  return static_cast<unsigned>(blocks);
}

inline unsigned grid_blocks(int64_t work_items, int threads = kBlockThreads) {
  int64_t blocks = (work_items + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxGridBlocks) blocks = kMaxGridBlocks;
  return static_cast<unsigned>(blocks);
}

// ---- dtype switch (host)

template <DType T>
struct DTypeTag {
  static constexpr DType value = T;
};

// Calls fn(DTypeTag<T>{}) for the float dtype t.
template <class Fn>
inline void with_float_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(DTypeTag<DType::kF32>{}); return;
    case DType::kBF16: fn(DTypeTag<DType::kBF16>{}); return;
    case DType::kF16: fn(DTypeTag<DType::kF16>{}); return;
    case DType::kI32: break;
  }
  ZE_CHECK(false) << "expected a float dtype, got " << dtype_name(t);
}

// ---- element conversions (device)

__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

__device__ __forceinline__ float fp16_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t float_to_fp16_bits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

// Element i of a buffer of storage dtype T, as fp32.
template <DType T>
__device__ __forceinline__ float load_elem(const void* base, int64_t i) {
  if constexpr (T == DType::kF32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (T == DType::kBF16) {
    return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
  } else {
    static_assert(T == DType::kF16, "float dtypes only");
    return fp16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
  }
}

// Stores fp32 v as element i of a buffer of storage dtype T (rounding to nearest even).
template <DType T>
__device__ __forceinline__ void store_elem(void* base, int64_t i, float v) {
  if constexpr (T == DType::kF32) {
    static_cast<float*>(base)[i] = v;
  } else if constexpr (T == DType::kBF16) {
    static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(v);
  } else {
    static_assert(T == DType::kF16, "float dtypes only");
    static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(v);
  }
}

// The same with the dtype known only at run time (parameter vectors, where a
// uniform branch per element costs nothing next to the memory traffic).
__device__ __forceinline__ float load_any(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16: return load_elem<DType::kBF16>(base, i);
    case DType::kF16: return load_elem<DType::kF16>(base, i);
    default: return load_elem<DType::kF32>(base, i);
  }
}

__device__ __forceinline__ void store_any(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kBF16: store_elem<DType::kBF16>(base, i, v); return;
    case DType::kF16: store_elem<DType::kF16>(base, i, v); return;
    default: store_elem<DType::kF32>(base, i, v); return;
  }
}

// ---- reductions (device)

inline constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread
// gets the result. `scratch` holds 32 values; the call begins and ends with a
// barrier, so consecutive calls may share it.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = lane < warps ? scratch[lane] : T(0);
  total = warp_sum(total);  // every warp reduces the same values in the same order
  return total;
}

}  // namespace zero::cuda
