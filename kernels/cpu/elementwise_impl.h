// Elementwise, embedding and reduction kernels as templates over the ISA V.
// Included only by the per-ISA kernel files; see kernel_common_impl.h.
#pragma once

#include <omp.h>

#include <cstring>

#include "kernels/cpu/kernel_common_impl.h"

namespace zero::cpu {
namespace {

template <class V>
void add_impl(const float* a, const float* b, float* out, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    W::store(out + i, W::add(W::load(a + i), W::load(b + i)));
  });
}

template <class V>
void accumulate_impl(void* dst, DType dst_dtype, const float* src, int64_t n) {
  with_float_dtype(dst_dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_lanes<V>(n, [&](auto w, int64_t i) {
      using W = decltype(w);
      vstore<W, T>(dst, i, W::add(vload<W, T>(dst, i), W::load(src + i)));
    });
  });
}

template <class V>
void scale_impl(void* x, DType dtype, float s, int64_t n) {
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_lanes<V>(n, [&](auto w, int64_t i) {
      using W = decltype(w);
      vstore<W, T>(x, i, W::mul(vload<W, T>(x, i), W::set1(s)));
    });
  });
}

// Fills of at least this many bytes (zeroing a model's gradients, a fresh
// buffer) write with streaming stores: half the memory traffic of normal
// stores, which first read every line they overwrite; the data is far larger
// than the caches, so nothing is lost by not leaving it there.
inline constexpr int64_t kStreamFillMinBytes = int64_t{4} << 20;

template <class V>
void fill_impl(void* x, DType dtype, float v, int64_t n) {
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    constexpr int64_t kElemBytes = T == DType::kF32 ? 4 : 2;
    if (n * kElemBytes < kStreamFillMinBytes || reinterpret_cast<uintptr_t>(x) % kElemBytes != 0) {
      parallel_lanes<V>(n, [&](auto w, int64_t i) {
        using W = decltype(w);
        vstore<W, T>(x, i, W::set1(v));
      });
      return;
    }
    parallel_ranges<V>(n, [&](int64_t begin, int64_t end) {
      // One-lane head up to the first vector-aligned element, streamed
      // vectors, then the one-lane tail.
      const int64_t head = first_stream_aligned<V, T>(x, begin, end);
      int64_t i = begin;
      for (; i < head; ++i) vstore<Scalar, T>(x, i, Scalar::set1(v));
      const typename V::F value = V::set1(v);
      for (; i + V::kWidth <= end; i += V::kWidth) vstream<V, T>(x, i, value);
      for (; i < end; ++i) vstore<Scalar, T>(x, i, Scalar::set1(v));
      _mm_sfence();  // streaming stores are weakly ordered
    });
  });
}

template <class V>
void cast_impl(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * (src_dtype == DType::kF32 ? 4 : 2));
    return;
  }
  with_float_dtype(src_dtype, [&](auto stag) {
    constexpr DType S = decltype(stag)::value;
    with_float_dtype(dst_dtype, [&](auto dtag) {
      constexpr DType D = decltype(dtag)::value;
      parallel_lanes<V>(n, [&](auto w, int64_t i) {
        using W = decltype(w);
        vstore<W, D>(dst, i, vload<W, S>(src, i));
      });
    });
  });
}

// Columns [c0, c1) of a row-major [rows, cols] matrix, summed down the rows in
// row order (deterministic), then added into dst(T).
template <class V, DType T>
void column_sums_into(const float* x, int64_t rows, int64_t cols, int64_t c0, int64_t c1, void* dst) {
  auto body = [&](auto w, int64_t c) {
    using W = decltype(w);
    typename W::F acc = W::zero();
    for (int64_t r = 0; r < rows; ++r) acc = W::add(acc, W::load(x + r * cols + c));
    vstore<W, T>(dst, c, W::add(vload<W, T>(dst, c), acc));
  };
  for_lanes<V>(c0, c1, body);
}

// Splits [0, cols) into per-thread column ranges that are multiples of the
// vector width (so threads never share a destination element).
template <class V, class Body>
void parallel_columns(int64_t cols, int64_t work, Body body) {
  if (work < kParallelMinElems || omp_get_max_threads() == 1) {
    body(int64_t{0}, cols);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (cols / nt + V::kWidth - 1) / V::kWidth * V::kWidth;
    const int64_t c0 = t * per < cols ? t * per : cols;
    const int64_t c1 = c0 + per < cols ? c0 + per : cols;
    if (t == nt - 1) body(c0, cols);
    else body(c0, c1);
  }
}

template <class V>
void bias_backward_impl(const float* dy, int64_t rows, int64_t cols, void* dbias, DType dtype) {
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_columns<V>(cols, rows * cols, [&](int64_t c0, int64_t c1) {
      column_sums_into<V, T>(dy, rows, cols, c0, c1, dbias);
    });
  });
}

template <class V>
void embedding_forward_impl(const int32_t* ids, int64_t n, const void* table, DType dtype,
                            int64_t cols, float* out, int64_t first, int64_t rows) {
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_rows(n, cols, [&](int64_t r) {
      const int64_t id = static_cast<int64_t>(ids[r]) - first;
      const int64_t base = id * cols;
      float* o = out + r * cols;
      if (rows >= 0 && (id < 0 || id >= rows)) {  // a row another rank's slice holds
        std::memset(o, 0, static_cast<size_t>(cols) * sizeof(float));
        return;
      }
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        W::store(o + c, vload<W, T>(table, base + c));
      };
      for_lanes<V>(0, cols, body);
    });
  });
}

template <class V>
void embedding_backward_impl(const int32_t* ids, int64_t n, const float* dout, int64_t cols,
                             void* dtable, DType dtype, int64_t first, int64_t rows) {
  // Rows of dtable may repeat in ids, so threads split the columns, not the rows.
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_columns<V>(cols, n * cols, [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < n; ++r) {
        const int64_t id = static_cast<int64_t>(ids[r]) - first;
        if (rows >= 0 && (id < 0 || id >= rows)) continue;
        const int64_t base = id * cols;
        const float* g = dout + r * cols;
        auto body = [&](auto w, int64_t c) {
          using W = decltype(w);
          vstore<W, T>(dtable, base + c, W::add(vload<W, T>(dtable, base + c), W::load(g + c)));
        };
        for_lanes<V>(c0, c1, body);
      }
    });
  });
}

template <class V>
void add_positional_impl(float* x, int64_t batch, int64_t seq, int64_t cols, const void* table,
                         DType dtype) {
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_rows(batch * seq, cols, [&](int64_t r) {
      const int64_t t = r % seq;
      float* o = x + r * cols;
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        W::store(o + c, W::add(W::load(o + c), vload<W, T>(table, t * cols + c)));
      };
      for_lanes<V>(0, cols, body);
    });
  });
}

template <class V>
void positional_backward_impl(const float* dy, int64_t batch, int64_t seq, int64_t cols,
                              void* dtable, DType dtype) {
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_rows(seq, batch * cols, [&](int64_t t) {
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        typename W::F acc = W::zero();
        for (int64_t b = 0; b < batch; ++b) acc = W::add(acc, W::load(dy + (b * seq + t) * cols + c));
        vstore<W, T>(dtable, t * cols + c, W::add(vload<W, T>(dtable, t * cols + c), acc));
      };
      for_lanes<V>(0, cols, body);
    });
  });
}

// Sum of squares in double: every value is widened to double and squared
// there (exact: a 24-bit significand squared fits in 53 bits). Each block of
// kBlock elements is summed in double vector lanes and the block sums are added
// to a double, so the rounding error stays ~(kBlock / width + n / kBlock) *
// 2^-53 relative, even for long runs of equal values. Threads own contiguous
// ranges and their partials are added in thread order.
template <class V>
double sum_squares_impl(const void* x, DType dtype, int64_t n) {
  constexpr int64_t kBlock = 1024;
  double total = 0.0;
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    auto range_sum = [&](int64_t begin, int64_t end) {
      double acc = 0.0;
      for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t e = b + kBlock < end ? b + kBlock : end;
        typename V::D lo = V::dzero(), hi = V::dzero();
        double tail = 0.0;
        auto body = [&](auto w, int64_t i) {
          using W = decltype(w);
          if constexpr (W::kWidth == 1) {
            const double v = vload<W, T>(x, i);
            tail += v * v;
          } else {
            W::square_add_f64(vload<W, T>(x, i), lo, hi);
          }
        };
        for_lanes<V>(b, e, body);
        acc += V::reduce_add_f64(lo, hi) + tail;
      }
      return acc;
    };
    if (n < kParallelMinElems || omp_get_max_threads() == 1) {
      total = range_sum(0, n);
      return;
    }
    const int nt = omp_get_max_threads();
    double partial[256] = {};
#pragma omp parallel num_threads(nt < 256 ? nt : 256)
    {
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      const int64_t per = (n / threads + kBlock - 1) / kBlock * kBlock;
      const int64_t begin = t * per < n ? t * per : n;
      const int64_t end = begin + per < n && t != threads - 1 ? begin + per : n;
      partial[t] = range_sum(begin, end);
    }
    for (int t = 0; t < 256; ++t) total += partial[t];
  });
  return total;
}

template <class V>
int64_t count_nonfinite_impl(const void* x, DType dtype, int64_t n) {
  int64_t count = 0;
  with_float_dtype(dtype, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
#pragma omp parallel reduction(+ : count) if (n >= kParallelMinElems)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t per = (n / nt) / V::kWidth * V::kWidth;
      const int64_t begin = t * per, end = t == nt - 1 ? n : begin + per;
      int64_t local = 0;
      auto body = [&](auto w, int64_t i) {
        using W = decltype(w);
        local += W::count_nonfinite(vload<W, T>(x, i));
      };
      for_lanes<V>(begin, end, body);
      count += local;
    }
  });
  return count;
}

}  // namespace
}  // namespace zero::cpu
