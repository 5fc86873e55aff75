// Row-softmax kernels as templates over the ISA V: the causal attention
// softmax (only columns <= row are read or computed, half the work of a masked
// full softmax) and the fused softmax cross-entropy over the vocabulary.
// Included only by the per-ISA kernel files; see kernel_common_impl.h.
#pragma once

#include <cmath>

#include "kernels/cpu/kernel_common_impl.h"

namespace zero::cpu {
namespace {

template <class V>
float row_max(const float* x, int64_t n) {
  typename V::F vm = V::set1(-INFINITY);
  float sm = -INFINITY;
  auto body = [&](auto w, int64_t i) {
    using W = decltype(w);
    if constexpr (W::kWidth == 1) sm = W::max(W::load(x + i), sm);
    else vm = W::max(W::load(x + i), vm);
  };
  for_lanes<V>(0, n, body);
  const float m = V::reduce_max(vm);
  return m > sm ? m : sm;
}

// out[i] = exp(x[i] - shift); returns the sum of out.
template <class V>
float exp_shifted(const float* x, float shift, float* out, int64_t n) {
  typename V::F vs = V::zero();
  float ss = 0.0f;
  auto body = [&](auto w, int64_t i) {
    using W = decltype(w);
    typename W::F e = simd_exp<W>(W::sub(W::load(x + i), W::set1(shift)));
    W::store(out + i, e);
    if constexpr (W::kWidth == 1) ss = W::add(ss, e);
    else vs = W::add(vs, e);
  };
  for_lanes<V>(0, n, body);
  return V::reduce_add(vs) + ss;
}

template <class V>
void scale_row(float* x, float s, int64_t n) {
  auto body = [&](auto w, int64_t i) {
    using W = decltype(w);
    W::store(x + i, W::mul(W::load(x + i), W::set1(s)));
  };
  for_lanes<V>(0, n, body);
}

template <class V>
void causal_softmax_forward_impl(const float* scores, float* probs, int64_t rows_bh, int64_t seq) {
  parallel_rows(rows_bh * seq, seq / 2 + 1, [&](int64_t r) {
    const int64_t t = r % seq;
    const float* x = scores + r * seq;
    float* p = probs + r * seq;
    const int64_t n = t + 1;
    const float m = row_max<V>(x, n);
    const float sum = exp_shifted<V>(x, m, p, n);
    scale_row<V>(p, 1.0f / sum, n);
    for (int64_t j = n; j < seq; ++j) p[j] = 0.0f;
  });
}

template <class V>
void causal_softmax_backward_impl(const float* probs, const float* dprobs, float* dscores,
                                  int64_t rows_bh, int64_t seq) {
  parallel_rows(rows_bh * seq, seq / 2 + 1, [&](int64_t r) {
    const int64_t t = r % seq;
    const float* p = probs + r * seq;
    const float* dp = dprobs + r * seq;
    float* ds = dscores + r * seq;
    const int64_t n = t + 1;
    typename V::F vdot = V::zero();
    float sdot = 0.0f;
    auto dot = [&](auto w, int64_t i) {
      using W = decltype(w);
      typename W::F prod = W::mul(W::load(p + i), W::load(dp + i));
      if constexpr (W::kWidth == 1) sdot = W::add(sdot, prod);
      else vdot = W::add(vdot, prod);
    };
    for_lanes<V>(0, n, dot);
    const float d = V::reduce_add(vdot) + sdot;
    auto grad = [&](auto w, int64_t i) {
      using W = decltype(w);
      W::store(ds + i, W::mul(W::load(p + i), W::sub(W::load(dp + i), W::set1(d))));
    };
    for_lanes<V>(0, n, grad);
    for (int64_t j = n; j < seq; ++j) ds[j] = 0.0f;
  });
}

template <class V>
void cross_entropy_impl(float* logits, const int32_t* targets, int64_t n, int64_t vocab,
                        float grad_scale, float* losses) {
  parallel_rows(n, vocab, [&](int64_t r) {
    float* x = logits + r * vocab;
    const int32_t target = targets[r];
    if (target < 0) {  // ignored position
      losses[r] = 0.0f;
      for (int64_t j = 0; j < vocab; ++j) x[j] = 0.0f;
      return;
    }
    const float m = row_max<V>(x, vocab);
    const float x_target = x[target];
    const float sum = exp_shifted<V>(x, m, x, vocab);  // x now holds exp(x - m)
    // max - x[target] first: at large logits (1e4, where one fp32 ulp is 1e-3)
    // the two are close and their difference is exact, whereas log(sum) + max
    // would round the small log(sum) away.
    losses[r] = (m - x_target) + std::log(sum);
    scale_row<V>(x, grad_scale / sum, vocab);          // grad_scale * softmax
    x[target] -= grad_scale;
  });
}

// ---- the vocabulary-parallel cross-entropy's phases (Ops::row_max,
// Ops::cross_entropy_slice_exp, Ops::cross_entropy_slice_finish): logits
// [n, cols] hold vocabulary columns [first, first + cols); max and sums come
// back reduced over the tensor group between the phases.
template <class V>
void row_max_impl(const float* x, int64_t n, int64_t cols, float* out) {
  parallel_rows(n, cols, [&](int64_t r) { out[r] = row_max<V>(x + r * cols, cols); });
}

template <class V>
void cross_entropy_slice_exp_impl(float* logits, const int32_t* targets, int64_t n, int64_t cols, int64_t first,
                                  const float* max, float* sums) {
  parallel_rows(n, cols, [&](int64_t r) {
    float* x = logits + r * cols;
    const int64_t j = static_cast<int64_t>(targets[r]) - first;
    sums[2 * r + 1] = targets[r] >= 0 && j >= 0 && j < cols ? x[j] : 0.0f;
    sums[2 * r] = exp_shifted<V>(x, max[r], x, cols);  // x now holds exp(x - max)
  });
}

template <class V>
void cross_entropy_slice_finish_impl(float* probs, const int32_t* targets, int64_t n, int64_t cols, int64_t first,
                                     const float* max, const float* sums, float grad_scale, float* losses) {
  parallel_rows(n, cols, [&](int64_t r) {
    float* x = probs + r * cols;
    if (targets[r] < 0) {  // ignored position
      losses[r] = 0.0f;
      for (int64_t j = 0; j < cols; ++j) x[j] = 0.0f;
      return;
    }
    const float sum = sums[2 * r];
    // As the fused kernel: max - x[target] first, then log(sum).
    losses[r] = (max[r] - sums[2 * r + 1]) + std::log(sum);
    scale_row<V>(x, grad_scale / sum, cols);
    const int64_t j = static_cast<int64_t>(targets[r]) - first;
    if (j >= 0 && j < cols) x[j] -= grad_scale;
  });
}

}  // namespace
}  // namespace zero::cpu
