// Building blocks of the SIMD kernel templates: typed vector loads and stores
// for each storage dtype, the dtype switch, and the OpenMP range split.
// Included only by the per-ISA kernel files (see simd.h for the ODR rule: all
// of it has internal linkage, so each ISA gets its own copy).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/cpu/simd.h"

namespace zero::cpu {
namespace {

template <DType T>
using DTypeTag = std::integral_constant<DType, T>;

// Calls fn(DTypeTag<T>{}) for the float dtype t.
template <class Fn>
inline void with_float_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(DTypeTag<DType::kF32>{}); return;
    case DType::kBF16: fn(DTypeTag<DType::kBF16>{}); return;
    case DType::kF16: fn(DTypeTag<DType::kF16>{}); return;
    case DType::kI32: break;
  }
  __builtin_trap();  // callers validate dtypes before reaching a kernel
}

template <class W, DType T>
inline typename W::F vload(const void* base, int64_t i) {
  if constexpr (T == DType::kF32) {
    return W::load(static_cast<const float*>(base) + i);
  } else if constexpr (T == DType::kBF16) {
    return W::load_bf16(static_cast<const uint16_t*>(base) + i);
  } else {
    return W::load_f16(static_cast<const uint16_t*>(base) + i);
  }
}

template <class W, DType T>
inline void vstore(void* base, int64_t i, typename W::F x) {
  if constexpr (T == DType::kF32) {
    W::store(static_cast<float*>(base) + i, x);
  } else if constexpr (T == DType::kBF16) {
    W::store_bf16(static_cast<uint16_t*>(base) + i, x);
  } else {
    W::store_f16(static_cast<uint16_t*>(base) + i, x);
  }
}

// A non-temporal (streaming) store of what vstore stores: for output that is
// not read back soon, as it skips reading the line it overwrites. The
// address must be aligned to the vector's bytes.
template <class W, DType T>
inline void vstream(void* base, int64_t i, typename W::F x) {
  if constexpr (T == DType::kF32) {
    W::stream(static_cast<float*>(base) + i, x);
  } else if constexpr (T == DType::kBF16) {
    W::stream_bf16(static_cast<uint16_t*>(base) + i, x);
  } else {
    W::stream_f16(static_cast<uint16_t*>(base) + i, x);
  }
}

// The first element of [begin, end) of a T array at base whose address is
// aligned for V's streaming stores (end when none is); elements before it
// are written one lane at a time. base must be aligned to T's size.
template <class V, DType T>
inline int64_t first_stream_aligned(const void* base, int64_t begin, int64_t end) {
  constexpr int64_t kElemBytes = T == DType::kF32 ? 4 : 2;
  constexpr int64_t kVectorBytes = V::kWidth * kElemBytes;
  const uintptr_t at = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(begin * kElemBytes);
  return std::min<int64_t>(end, begin + static_cast<int64_t>((kVectorBytes - at % kVectorBytes) % kVectorBytes) /
                                            kElemBytes);
}

// Runs body(W{}, i) over [begin, end): full vectors of V, then one-lane tails
// with Scalar (same arithmetic, see simd.h).
template <class V, class Body>
inline void for_lanes(int64_t begin, int64_t end, Body& body) {
  int64_t i = begin;
  for (; i + V::kWidth <= end; i += V::kWidth) body(V{}, i);
  for (; i < end; ++i) body(Scalar{}, i);
}

// Below this many elements a kernel runs on the calling thread only.
inline constexpr int64_t kParallelMinElems = 1 << 15;

// Splits [0, n) into one contiguous range per OpenMP thread, each a multiple
// of the vector width but the last, and calls fn(begin, end) on each (one
// call on the calling thread when n is small).
template <class V, class Fn>
inline void parallel_ranges(int64_t n, Fn fn) {
  if (n < kParallelMinElems || omp_get_max_threads() == 1) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (n / nt) / V::kWidth * V::kWidth;
    const int64_t begin = t * per, end = t == nt - 1 ? n : begin + per;
    fn(begin, end);
  }
}

// parallel_ranges with body(W{}, i) run over each range by for_lanes.
template <class V, class Body>
inline void parallel_lanes(int64_t n, Body body) {
  parallel_ranges<V>(n, [&](int64_t begin, int64_t end) { for_lanes<V>(begin, end, body); });
}

// Rows [0, rows) split across threads (for row-wise kernels).
template <class Body>
inline void parallel_rows(int64_t rows, int64_t work_per_row, Body body) {
  if (rows * work_per_row < kParallelMinElems || omp_get_max_threads() == 1) {
    for (int64_t r = 0; r < rows; ++r) body(r);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) body(r);
}

}  // namespace
}  // namespace zero::cpu
