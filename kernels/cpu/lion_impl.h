// Lion over flat fp32 master weights, fused with the write of the 16-bit (or
// fp32) parameter copy, as a template over the ISA V (see LionHyper for the
// update rule). Element by element, with the same fused multiply-adds on every
// path (vectors and one-lane tails, so results do not depend on where a range
// boundary falls):
//   g = grad * grad_scale
//   c = fma(g, 1 - b1, m * b1)
//   p = fma(p, -lr * wd, p)                    (decoupled decay, when wd != 0)
//   p = fma(sign(c), -lr, p)                   (exact product: one rounding)
//   m = fma(g, 1 - b2, m * b2)
// One pass reads p, g, m and writes p, m (+ the copy); the loop is specialised
// on the dtypes, the copy and the decay, as adamw_impl.h's is.
#pragma once

#include <type_traits>

#include "kernels/cpu/kernel_common_impl.h"
#include "kernels/optimizer_hyper.h"

namespace zero::cpu {
namespace {

// Runs one Lion step over n elements (see the file comment); param_out may be
// null (then param_dtype is ignored).
template <class V>
void lion_impl(float* master, const void* grad, DType grad_dtype, float* exp_avg, void* param_out,
               DType param_dtype, int64_t n, const LionHyper& h) {
  const float grad_scale = h.grad_scale, beta1 = h.beta1, one_minus_beta1 = 1.0f - h.beta1;
  const float beta2 = h.beta2, one_minus_beta2 = 1.0f - h.beta2;
  const float decay = -h.lr * h.weight_decay, step = -h.lr;
  with_float_dtype(grad_dtype, [&](auto gtag) {
    auto with_copy = [&](auto ptag, auto copy_tag) {
      auto with_decay = [&](auto decay_tag) {
        constexpr DType G = decltype(gtag)::value, P = decltype(ptag)::value;
        constexpr bool kCopy = decltype(copy_tag)::value, kDecay = decltype(decay_tag)::value;
        parallel_lanes<V>(n, [&](auto w, int64_t i) {
          using W = decltype(w);
          using F = typename W::F;
          F p = W::load(master + i);
          const F g = W::mul(vload<W, G>(grad, i), W::set1(grad_scale));
          const F m = W::load(exp_avg + i);
          const F c = W::fmadd(g, W::set1(one_minus_beta1), W::mul(m, W::set1(beta1)));
          if constexpr (kDecay) p = W::fmadd(p, W::set1(decay), p);
          p = W::fmadd(W::sign(c), W::set1(step), p);
          W::store(master + i, p);
          W::store(exp_avg + i, W::fmadd(g, W::set1(one_minus_beta2), W::mul(m, W::set1(beta2))));
          if constexpr (kCopy) vstore<W, P>(param_out, i, p);
        });
      };
      if (h.weight_decay != 0.0f) {
        with_decay(std::true_type{});
      } else {
        with_decay(std::false_type{});
      }
    };
    if (param_out == nullptr) {
      with_copy(DTypeTag<DType::kF32>{}, std::false_type{});
    } else {
      with_float_dtype(param_dtype, [&](auto ptag) { with_copy(ptag, std::true_type{}); });
    }
  });
}

}  // namespace
}  // namespace zero::cpu
