// The Llama family's kernels as templates over the ISA V: RMSNorm forward
// and backward, rotary embeddings, the SwiGLU gate. Included only by the
// per-ISA kernel files; see kernel_common_impl.h. Also Gemma's GeGLU gate
// and its (1 + gamma) RMSNorm, and logit soft-capping. The arithmetic follows
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
void rmsnorm_forward_impl(const float* x, const void* gamma, DType gdt, float offset, float eps, float* y,
                          float* rstd, int64_t rows, int64_t cols) {
  with_float_dtype(gdt, [&](auto tag) {
    constexpr DType T = decltype(tag)::value;
    parallel_rows(rows, cols, [&](int64_t r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      const float s = 1.0f / std::sqrt(dot_row<V>(xr, xr, cols) / static_cast<float>(cols) + eps);
      rstd[r] = s;
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        W::store(yr + c, W::mul(W::mul(W::load(xr + c), W::set1(s)), W::add(vload<W, T>(gamma, c), W::set1(offset))));
      };
      for_lanes<V>(0, cols, body);
    });
  });
}

// With xh = x rstd and g = dy (gamma + offset):
//   dx = rstd (g - xh mean_c(g xh)),  dgamma[c] += sum_n dy xh.
template <class V>
void rmsnorm_backward_impl(const float* dy, const float* x, const void* gamma, DType gdt, float offset,
                           const float* rstd, float* dx, void* dgamma, DType dgdt, int64_t rows, int64_t cols) {
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
        typename W::F g = W::mul(W::load(dyr + c), W::add(vload<W, T>(gamma, c), W::set1(offset)));
        if constexpr (W::kWidth == 1) tail = W::fmadd(g, W::load(xr + c), tail);
        else acc = W::fmadd(g, W::load(xr + c), acc);
      };
      for_lanes<V>(0, cols, sum);
      const float m = (V::reduce_add(acc) + tail) * s / static_cast<float>(cols);
      auto body = [&](auto w, int64_t c) {
        using W = decltype(w);
        typename W::F g = W::mul(W::load(dyr + c), W::add(vload<W, T>(gamma, c), W::set1(offset)));
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

// tanh(u) = 1 - 2 / (e^{2u} + 1) (simd_exp clamps, so it saturates to +-1).
template <class W>
typename W::F simd_tanh(typename W::F u) {
  const typename W::F e = simd_exp<W>(W::add(u, u));
  return W::sub(W::set1(1.0f), W::div(W::set1(2.0f), W::add(e, W::set1(1.0f))));
}

// GELU's tanh form as torch's gelu(approximate="tanh"), 0.5 x (1 + tanh u)
// with u = sqrt(2/pi) (x + 0.044715 x^3), written as x s with s = sigmoid(2 u)
// (1 + tanh u = 2 s): the same function without 1 + tanh u's cancellation
// where tanh u is near -1 (x below about -3), so its derivative keeps its
// relative accuracy there. Returns gelu(x) and s.
template <class W>
typename W::F gelu_tanh(typename W::F x, typename W::F& s) {
  const typename W::F x3 = W::mul(W::mul(x, x), x);
  s = sigmoid<W>(W::mul(W::set1(2.0f * 0.7978845608028654f), W::fmadd(W::set1(0.044715f), x3, x)));
  return W::mul(x, s);
}

// Logit soft-capping as Hugging Face's Gemma 2: ((x / cap).tanh()) * cap.
template <class V>
void softcap_forward_impl(const float* x, float cap, float* y, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    W::store(y + i, W::mul(simd_tanh<W>(W::div(W::load(x + i), W::set1(cap))), W::set1(cap)));
  });
}

// dx = dy (1 - t^2), t = y / cap.
template <class V>
void softcap_backward_impl(const float* y, const float* dy, float cap, float* dx, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    const typename W::F t = W::div(W::load(y + i), W::set1(cap));
    W::store(dx + i, W::mul(W::load(dy + i), W::sub(W::set1(1.0f), W::mul(t, t))));
  });
}

template <class V>
void geglu_forward_impl(const float* gate, const float* up, float* h, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    typename W::F t;
    W::store(h + i, W::mul(gelu_tanh<W>(W::load(gate + i), t), W::load(up + i)));
  });
}

// gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = tanh u, u' =
// sqrt(2/pi) (1 + 3 0.044715 x^2); in s = sigmoid(2 u) (1 + t = 2 s,
// 1 - t^2 = 4 s (1 - s)): s + 2 x s (1 - s) u'.
template <class V>
void geglu_backward_impl(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  parallel_lanes<V>(n, [&](auto w, int64_t i) {
    using W = decltype(w);
    const typename W::F g = W::load(gate + i), u = W::load(up + i), d = W::load(dh + i);
    typename W::F s;
    const typename W::F gelu = gelu_tanh<W>(g, s);
    const typename W::F du = W::mul(W::set1(2.0f * 0.7978845608028654f),
                                    W::fmadd(W::set1(3.0f * 0.044715f), W::mul(g, g), W::set1(1.0f)));
    const typename W::F dgelu = W::fmadd(W::mul(W::mul(g, s), W::sub(W::set1(1.0f), s)), du, s);
    W::store(dgate + i, W::mul(W::mul(d, u), dgelu));
    W::store(dup + i, W::mul(d, gelu));
  });
}

}  // namespace
}  // namespace zero::cpu
