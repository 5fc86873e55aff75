// Adam/AdamW (and SGD) over flat fp32 master weights, fused with the write of the
// 16-bit (or fp32) parameter copy, as a template over the ISA V. DeepSpeed's
// CPU-Adam arithmetic, element by element:
//   g = grad * grad_scale;  if (!adamw && wd) g += wd * p
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps
//   if (adamw && wd) p -= lr * wd * p          (decoupled, before the update)
//   p -= lr / (1 - b1^t) * m / denom
// One pass reads p, g, m, v and writes p, m, v (+ the 2-byte copy).
#pragma once

#include <cmath>

#include "kernels/optimizer_hyper.h"
#include "kernels/cpu/kernel_common_impl.h"

namespace zero::cpu {
namespace {

template <class V>
void adamw_impl(float* master, const void* grad, DType grad_dtype, float* m, float* v,
                void* param_out, DType param_dtype, int64_t n, const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const float bc1 = h.bias_correction ? static_cast<float>(1.0 - std::pow(h.beta1, t)) : 1.0f;
  const float bc2_rsqrt =
      h.bias_correction ? static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t))) : 1.0f;
  const float step_size = -h.lr / bc1;
  const float decay = -h.lr * h.weight_decay;
  const bool l2 = !h.adamw_mode && h.weight_decay > 0.0f;
  const bool decoupled = h.adamw_mode && h.weight_decay > 0.0f;

  with_float_dtype(grad_dtype, [&](auto gtag) {
    constexpr DType G = decltype(gtag)::value;
    auto run = [&](auto ptag, bool write_param) {
      constexpr DType P = decltype(ptag)::value;
      parallel_lanes<V>(n, [&](auto w, int64_t i) {
        using W = decltype(w);
        using F = typename W::F;
        F p = W::load(master + i);
        F g = W::mul(vload<W, G>(grad, i), W::set1(h.grad_scale));
        if (l2) g = W::fmadd(p, W::set1(h.weight_decay), g);
        F mi = W::fmadd(g, W::set1(1.0f - h.beta1), W::mul(W::load(m + i), W::set1(h.beta1)));
        F vi = W::fmadd(W::mul(g, g), W::set1(1.0f - h.beta2), W::mul(W::load(v + i), W::set1(h.beta2)));
        F denom = W::fmadd(W::sqrt(vi), W::set1(bc2_rsqrt), W::set1(h.eps));
        if (decoupled) p = W::fmadd(p, W::set1(decay), p);
        p = W::fmadd(W::div(mi, denom), W::set1(step_size), p);
        W::store(master + i, p);
        W::store(m + i, mi);
        W::store(v + i, vi);
        if (write_param) vstore<W, P>(param_out, i, p);
      });
    };
    if (param_out == nullptr) {
      run(DTypeTag<DType::kF32>{}, false);
    } else {
      with_float_dtype(param_dtype, [&](auto ptag) { run(ptag, true); });
    }
  });
}

// torch.optim.SGD's arithmetic (see SgdHyper), fused with the parameter copy.
template <class V>
void sgd_impl(float* master, const void* grad, DType grad_dtype, float* buf, void* param_out,
              DType param_dtype, int64_t n, const SgdHyper& h) {
  const bool use_momentum = h.momentum != 0.0f;
  with_float_dtype(grad_dtype, [&](auto gtag) {
    constexpr DType G = decltype(gtag)::value;
    auto run = [&](auto ptag, bool write_param) {
      constexpr DType P = decltype(ptag)::value;
      parallel_lanes<V>(n, [&](auto w, int64_t i) {
        using W = decltype(w);
        using F = typename W::F;
        F p = W::load(master + i);
        F d = W::mul(vload<W, G>(grad, i), W::set1(h.grad_scale));
        if (h.weight_decay != 0.0f) d = W::fmadd(p, W::set1(h.weight_decay), d);
        if (use_momentum) {
          F b = h.first_step ? d
                             : W::fmadd(d, W::set1(1.0f - h.dampening),
                                        W::mul(W::load(buf + i), W::set1(h.momentum)));
          W::store(buf + i, b);
          d = h.nesterov ? W::fmadd(b, W::set1(h.momentum), d) : b;
        }
        p = W::fmadd(d, W::set1(-h.lr), p);
        W::store(master + i, p);
        if (write_param) vstore<W, P>(param_out, i, p);
      });
    };
    if (param_out == nullptr) {
      run(DTypeTag<DType::kF32>{}, false);
    } else {
      with_float_dtype(param_dtype, [&](auto ptag) { run(ptag, true); });
    }
  });
}

}  // namespace
}  // namespace zero::cpu
