// Adam/AdamW (and SGD) over flat fp32 master weights, fused with the write of the
// 16-bit (or fp32) parameter copy, as a template over the ISA V; Adam also over
// 16-bit master weights and moments (adamw_narrow_impl). DeepSpeed's
// CPU-Adam arithmetic, element by element:
//   g = grad * grad_scale;  if (!adamw && wd) g += wd * p
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps
//   if (adamw && wd) p -= lr * wd * p          (decoupled, before the update)
//   p -= lr / (1 - b1^t) * m / denom
// One pass reads p, g, m, v and writes p, m, v (+ the copy): 28 (30 with a
// bf16 copy) bytes per parameter, so the kernel is bound by memory, and what
// decides its speed is how many cache misses the core keeps in flight
// (bench/adam_bench.cc measures it against adam_streams, the same loads and
// stores without the arithmetic; bench/peers/adam_vs_deepspeed.py against
// DeepSpeed's CPU Adam):
//  * the loop is specialised on every option (dtypes, decay mode, copy or not)
//    and runs over a whole range per call with the scalars in registers: a
//    short loop body lets more iterations, so more misses, overlap;
//  * a large parameter copy is written with streaming stores: it is output
//    only, and a normal store first reads the line it overwrites.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/optimizer_hyper.h"
#include "kernels/cpu/kernel_common_impl.h"

namespace zero::cpu {
namespace {

// The step's scalars, computed once per call.
struct AdamScalars {
  float grad_scale, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bc2_rsqrt, eps, decay, step_size;
};

// The same broadcast into W's lanes, once per thread.
template <class W>
struct AdamLanes {
  using F = typename W::F;
  explicit AdamLanes(const AdamScalars& s)
      : grad_scale(W::set1(s.grad_scale)), weight_decay(W::set1(s.weight_decay)),
        beta1(W::set1(s.beta1)), one_minus_beta1(W::set1(s.one_minus_beta1)),
        beta2(W::set1(s.beta2)), one_minus_beta2(W::set1(s.one_minus_beta2)),
        bc2_rsqrt(W::set1(s.bc2_rsqrt)), eps(W::set1(s.eps)), decay(W::set1(s.decay)),
        step_size(W::set1(s.step_size)) {}
  F grad_scale, weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_rsqrt, eps,
      decay, step_size;
};

enum class AdamDecay { kNone, kL2, kDecoupled };
template <AdamDecay D>
using DecayTag = std::integral_constant<AdamDecay, D>;
enum class CopyStore { kNone, kStore, kStream };  // how the parameter copy is written

// Below this many elements the copy is written with normal stores: a small
// copy may still be in cache when it is read next.
inline constexpr int64_t kStreamCopyMinElems = int64_t{1} << 16;

// The update of the W::kWidth elements at i (one lane for W = Scalar). The
// master weights are stored as M and the moments as S (fp32, or 16-bit
// widened on load and rounded to nearest even on store: the arithmetic is
// fp32 either way, so a 16-bit step is the fp32 step over the widened values,
// rounded, bit for bit).
template <class W, DType M, DType S, DType G, DType P, AdamDecay D, CopyStore C>
inline void adamw_lanes(const AdamLanes<W>& c, void* master, const void* grad, void* m, void* v,
                        void* param_out, int64_t i) {
  using F = typename W::F;
  F p = vload<W, M>(master, i);
  F g = W::mul(vload<W, G>(grad, i), c.grad_scale);
  if constexpr (D == AdamDecay::kL2) g = W::fmadd(p, c.weight_decay, g);
  const F mi = W::fmadd(g, c.one_minus_beta1, W::mul(vload<W, S>(m, i), c.beta1));
  const F vi = W::fmadd(W::mul(g, g), c.one_minus_beta2, W::mul(vload<W, S>(v, i), c.beta2));
  const F denom = W::fmadd(W::sqrt(vi), c.bc2_rsqrt, c.eps);
  if constexpr (D == AdamDecay::kDecoupled) p = W::fmadd(p, c.decay, p);
  p = W::fmadd(W::div(mi, denom), c.step_size, p);
  vstore<W, M>(master, i, p);
  vstore<W, S>(m, i, mi);
  vstore<W, S>(v, i, vi);
  if constexpr (C == CopyStore::kStore) vstore<W, P>(param_out, i, p);
  if constexpr (C == CopyStore::kStream) vstream<W, P>(param_out, i, p);
}

// Elements [begin, end): full vectors of V, then one-lane tails (the same
// arithmetic, see simd.h). With stream_copy, the vectors write the copy with
// streaming stores, after one-lane heads up to the first element whose copy
// address is aligned for them.
template <class V, DType M, DType S, DType G, DType P, AdamDecay D, bool kCopy>
void adamw_range(const AdamScalars s, void* master, const void* grad, void* m, void* v,
                 void* param_out, bool stream_copy, int64_t begin, int64_t end) {
  constexpr CopyStore kStore = kCopy ? CopyStore::kStore : CopyStore::kNone;
  const AdamLanes<V> cv(s);
  const AdamLanes<Scalar> c1(s);
  int64_t i = begin;
  if constexpr (kCopy) {
    constexpr uintptr_t kElemBytes = P == DType::kF32 ? 4 : 2;
    if (stream_copy && reinterpret_cast<uintptr_t>(param_out) % kElemBytes == 0) {
      const int64_t head = first_stream_aligned<V, P>(param_out, begin, end);
      for (; i < head; ++i)
        adamw_lanes<Scalar, M, S, G, P, D, kStore>(c1, master, grad, m, v, param_out, i);
      for (; i + V::kWidth <= end; i += V::kWidth)
        adamw_lanes<V, M, S, G, P, D, CopyStore::kStream>(cv, master, grad, m, v, param_out, i);
      _mm_sfence();  // streaming stores are weakly ordered
    }
  }
  for (; i + V::kWidth <= end; i += V::kWidth)
    adamw_lanes<V, M, S, G, P, D, kStore>(cv, master, grad, m, v, param_out, i);
  for (; i < end; ++i) adamw_lanes<Scalar, M, S, G, P, D, kStore>(c1, master, grad, m, v, param_out, i);
}

// The step's scalars and decay mode from the hyper-parameters (DeepSpeed's).
inline AdamScalars adam_scalars(const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const float bc1 = h.bias_correction ? static_cast<float>(1.0 - std::pow(h.beta1, t)) : 1.0f;
  AdamScalars s;
  s.grad_scale = h.grad_scale;
  s.weight_decay = h.weight_decay;
  s.beta1 = h.beta1;
  s.one_minus_beta1 = 1.0f - h.beta1;
  s.beta2 = h.beta2;
  s.one_minus_beta2 = 1.0f - h.beta2;
  s.bc2_rsqrt =
      h.bias_correction ? static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, t))) : 1.0f;
  s.eps = h.eps;
  s.decay = -h.lr * h.weight_decay;
  s.step_size = -h.lr / bc1;
  return s;
}

inline AdamDecay adam_decay(const AdamWHyper& h) {
  if (h.weight_decay <= 0.0f) return AdamDecay::kNone;
  return h.adamw_mode ? AdamDecay::kDecoupled : AdamDecay::kL2;
}

// Runs adamw_range<V, M, S, G, P, D, kCopy> over [0, n) on the OpenMP threads,
// with the decay mode as a template argument.
template <class V, DType M, DType S, DType G, DType P, bool kCopy>
void adamw_parallel(const AdamWHyper& h, void* master, const void* grad, void* m, void* v, void* param_out,
                    int64_t n) {
  const AdamScalars s = adam_scalars(h);
  const bool stream_copy = param_out != nullptr && n >= kStreamCopyMinElems;
  auto run = [&](auto decay_tag) {
    constexpr AdamDecay D = decltype(decay_tag)::value;
    parallel_ranges<V>(n, [&](int64_t begin, int64_t end) {
      adamw_range<V, M, S, G, P, D, kCopy>(s, master, grad, m, v, param_out, stream_copy, begin, end);
    });
  };
  switch (adam_decay(h)) {
    case AdamDecay::kNone: return run(DecayTag<AdamDecay::kNone>{});
    case AdamDecay::kL2: return run(DecayTag<AdamDecay::kL2>{});
    case AdamDecay::kDecoupled: return run(DecayTag<AdamDecay::kDecoupled>{});
  }
}

template <class V>
void adamw_impl(float* master, const void* grad, DType grad_dtype, float* m, float* v,
                void* param_out, DType param_dtype, int64_t n, const AdamWHyper& h) {
  with_float_dtype(grad_dtype, [&](auto gtag) {
    constexpr DType G = decltype(gtag)::value, F32 = DType::kF32;
    if (param_out == nullptr) return adamw_parallel<V, F32, F32, G, F32, false>(h, master, grad, m, v, nullptr, n);
    with_float_dtype(param_dtype, [&](auto ptag) {
      adamw_parallel<V, F32, F32, G, decltype(ptag)::value, true>(h, master, grad, m, v, param_out, n);
    });
  });
}

// Over 16-bit master weights (bf16 or fp16; the gradients and the optional
// parameter copy in the same dtype) with moments in fp32 or, under a bf16
// master, bf16: the widening and the rounding back happen in registers, so
// the pass moves 16 bytes per parameter with bf16 states (read p, g, m, v;
// write p, m, v) instead of staging fp32 copies.
template <class V>
void adamw_narrow_impl(void* master, DType master_dtype, void* m, void* v, DType state_dtype, const void* grad,
                       void* param_out, int64_t n, const AdamWHyper& h) {
  auto run = [&](auto mtag, auto stag) {
    constexpr DType M = decltype(mtag)::value, S = decltype(stag)::value;
    if (param_out == nullptr) return adamw_parallel<V, M, S, M, M, false>(h, master, grad, m, v, nullptr, n);
    adamw_parallel<V, M, S, M, M, true>(h, master, grad, m, v, param_out, n);
  };
  if (master_dtype == DType::kBF16 && state_dtype == DType::kBF16) {
    return run(DTypeTag<DType::kBF16>{}, DTypeTag<DType::kBF16>{});
  }
  if (master_dtype == DType::kBF16 && state_dtype == DType::kF32) {
    return run(DTypeTag<DType::kBF16>{}, DTypeTag<DType::kF32>{});
  }
  if (master_dtype == DType::kF16 && state_dtype == DType::kF32) {
    return run(DTypeTag<DType::kF16>{}, DTypeTag<DType::kF32>{});
  }
  __builtin_trap();  // CpuOps::adamw validates the dtypes
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
