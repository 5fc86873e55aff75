// The Llama family's kernels as templates over the ISA V: RMSNorm forward
// and backward, rotary embeddings, the SwiGLU gate. Included only by the
// per-ISA kernel files; see kernel_common_impl.h. The arithmetic follows
// Hugging Face's modules operation for operation (RMSNorm: (x * rstd) *
// gamma; RoPE: x cos + rotate_half(x) sin; SwiGLU: (g sigmoid(g)) u), so an
// fp32 run reproduces theirs to rounding.
#pragma once

#include <cmath>

#include "kernels/cpu/elementwise_impl.h"
#include "kernels/cpu/kernel_common_impl.h"

namespace zero::cpu {
namespace {

// Sum of a[i] * b[i] over [0, n), fp32 lanes then the one-lane tail.
template <class V>
float dot_row(const float* a, const float* b, int64_t n) {
  typename V::F acc = V::zero();
  float tail = 0.0f;
  auto body = [&](auto w, int64_t i) {
    using W = decltype(w);
    if constexpr (W::kWidth == 1) tail = W::fmadd(W::load(a + i), W::load(b + i), tail);
    else acc = W::fmadd(W::load(a + i), W::load(b + i), acc);
  };
  for_lanes<V>(0, n, body);
  return V::reduce_add(acc) + tail;
}

template <class V>
void rmsnorm_forward_impl(const float* x, const void* gamma, DType gdt, float eps, float* y, float* rstd,
                          int64_t rows, int64_t cols) {
  with_float_dtype(gdt, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_rows(rows, cols, [&](int64_t r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const float s = 1.0f / std::sqrt(dot_row<V>(xr, xr, cols) / static_cast<float>(cols) + eps);
      rstd[r] = s;
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        W::store(yr + c, W::mul(W::mul(W::load(xr + c), W::set1(s)), vload<W, T>(gamma, c)));
      };
      for_lanes<V>(0, cols, body);
    });
  });
}

// With xh = x rstd and g = dy gamma:
//   dx = rstd (g - xh mean_c(g xh)),  dgamma[c] += sum_n dy xh.
template <class V>
void rmsnorm_backward_impl(const float* dy, const float* x, const void* gamma, DType gdt, const float* rstd,
                           float* dx, void* dgamma, DType dgdt, int64_t rows, int64_t cols) {
  with_float_dtype(gdt, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_rows(rows, cols, [&](int64_t r) {
      const float* xr = x + r * cols;
      const float* dyr = dy + r * cols;
      float* dxr = dx + r * cols;
      const float s = rstd[r];
      // mean_c(g xh) = rstd mean_c(dy gamma x)
      typename V::F acc = V::zero();
      float tail = 0.0f;
      auto sum = [&](auto w, int64_t c) {
        using W = decltype(w);
        typename W::F g = W::mul(W::load(dyr + c), vload<W, T>(gamma, c));
        if constexpr (W::kWidth == 1) tail = W::fmadd(g, W::load(xr + c), tail);
        else acc = W::fmadd(g, W::load(xr + c), acc);
      };
      for_lanes<V>(0, cols, sum);
      const float m = (V::reduce_add(acc) + tail) * s / static_cast<float>(cols);
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        typename W::F g = W::mul(W::load(dyr + c), vload<W, T>(gamma, c));
        typename W::F xh = W::mul(W::load(xr + c), W::set1(s));
        W::store(dxr + c, W::mul(W::set1(s), W::sub(g, W::mul(xh, W::set1(m)))));
      };
      for_lanes<V>(0, cols, body);
    });
  });
  with_float_dtype(dgdt, [&](auto tag) {
    constexpr DType G = decltype(tag)::value;
    parallel_columns<V>(cols, rows * cols, [&](int64_t c0, int64_t c1) {
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        typename W::F acc = W::zero();
        for (int64_t r = 0; r < rows; ++r) {
          acc = W::add(acc, W::mul(W::load(dy + r * cols + c), W::mul(W::load(x + r * cols + c), W::set1(rstd[r]))));
        }
        vstore<W, G>(dgamma, c, W::add(vload<W, G>(dgamma, c), acc));
      };
      for_lanes<V>(c0, c1, body);
    });
  });
}

// x, y [bh, seq, 2 half]; row t at position first + t. One table of cos and
// sin per position, shared by every head.
template <class V>
void rope_impl(const float* x, float* y, int64_t bh, int64_t seq, int64_t half, const float* inv_freq,
               int64_t first, bool inverse) {
  const int64_t dim = 2 * half;
  parallel_rows(seq, bh * dim, [&](int64_t t) {
    float cs[256], sn[256];
    const float pos = static_cast<float>(first + t);
    for (int64_t i = 0; i < half; ++i) {
      const float a = pos * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = inverse ? -std::sin(a) : std::sin(a);
    }
    for (int64_t h = 0; h < bh; ++h) {
      const float* xr = x + (h * seq + t) * dim;
      float* yr = y + (h * seq + t) * dim;
      auto body = [&](auto w, int64_t i) {
        using W = decltype(w);
        const typename W::F x1 = W::load(xr + i), x2 = W::load(xr + half + i);
        const typename W::F c = W::load(cs + i), s = W::load(sn + i);
        W::store(yr + i, W::sub(W::mul(x1, c), W::mul(x2, s)));
        W::store(yr + half + i, W::add(W::mul(x2, c), W::mul(x1, s)));
      };
      for_lanes<V>(0, half, body);
    }
  });
}

template <class W>
typename W::F sigmoid(typename W::F g) {
  return W::div(W::set1(1.0f), W::add(W::set1(1.0f), simd_exp<W>(W::sub(W::zero(), g))));
}

template <class V>
void swiglu_forward_impl(const float* gate, const float* up, float* h, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    const typename W::F g = W::load(gate + i);
    W::store(h + i, W::mul(W::mul(g, sigmoid<W>(g)), W::load(up + i)));
  });
}

template <class V>
void swiglu_backward_impl(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    const typename W::F g = W::load(gate + i), u = W::load(up + i), d = W::load(dh + i);
    const typename W::F s = sigmoid<W>(g);
    const typename W::F silu = W::mul(g, s);
    // silu'(g) = s (1 + g (1 - s))
    const typename W::F ds = W::mul(s, W::add(W::set1(1.0f), W::mul(g, W::sub(W::set1(1.0f), s))));
    W::store(dgate + i, W::mul(W::mul(d, u), ds));
    W::store(dup + i, W::mul(d, silu));
  });
}

}  // namespace
}  // namespace zero::cpu
