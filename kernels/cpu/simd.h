// Thin SIMD vocabulary for the hand-written CPU kernels: one struct per ISA
// with the same static functions, so a kernel is written once as a template
// over the ISA and compiled twice (kernels/cpu/*_avx512.cc with AVX-512 flags,
// *_avx2.cc with AVX2+FMA+F16C flags); isa.cc picks one at run time by CPUID.
//
// ODR rule for files that include this header: everything they define lives in
// an anonymous namespace and they call no inline function of another header
// that could be emitted out of line with wider instructions than the machine
// has (the whole file is compiled with the ISA's flags).
//
// bf16 conversion uses integer round-to-nearest-even (works on any AVX-512F or
// AVX2 CPU, no AVX512-BF16 needed) and keeps NaNs quiet, matching
// float_to_bf16() in core/dtype.h bit for bit.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace zero::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__)
struct Avx512 {
  using F = __m512;
  static constexpr int kWidth = 16;
  static constexpr const char* kName = "avx512";

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F zero() { return _mm512_setzero_ps(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }  // a*b + c
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static float reduce_add(F a) { return _mm512_reduce_add_ps(a); }
  static float reduce_max(F a) { return _mm512_reduce_max_ps(a); }

  static F load_bf16(const uint16_t* p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static void store_bf16(uint16_t* p, F x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_bits(x));
  }
  // The 16 bf16 values store_bf16 writes.
  static __m256i bf16_bits(F x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));  // quiet NaN
    r = _mm512_srli_epi32(r, 16);
    return _mm512_cvtepi32_epi16(r);
  }
  static F load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_f16(uint16_t* p, F x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Non-temporal (streaming) stores of what store / store_bf16 / store_f16
  // write, for outputs nobody reads soon: they skip reading the line first.
  // p must be aligned to the bytes written (64 for fp32, 32 for 16-bit), and
  // the caller fences (_mm_sfence) before another thread reads the data.
  static void stream(float* p, F x) { _mm512_stream_ps(p, x); }
  static void stream_bf16(uint16_t* p, F x) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bf16_bits(x));
  }
  static void stream_f16(uint16_t* p, F x) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Lanes that are inf or NaN.
  static int count_nonfinite(F x) {
    __m512i e = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7f800000));
    return __builtin_popcount(_mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0x7f800000)));
  }
  // 2^n for integer-valued n (float lanes).
  static F pow2i(F n) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static F round(F x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // torch.sign: 1 for x > 0, -1 for x < 0, 0 for +-0, NaN (x itself) for NaN.
  static F sign(F x) {
    const F zero = _mm512_setzero_ps();
    F r = _mm512_mask_mov_ps(zero, _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), _mm512_set1_ps(1.0f));
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), _mm512_set1_ps(-1.0f));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }

  // Double lanes for sums that must not lose bits: x widened to double (low and
  // high halves) and squared exactly, then added into lo and hi. (extractf32x8
  // rather than the casts and _mm512_reduce_*, whose GCC 12 expansions trip
  // -Wuninitialized.)
  using D = __m512d;
  static D dzero() { return _mm512_setzero_pd(); }
  static void square_add_f64(F x, D& lo, D& hi) {
    const D xl = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 0));
    const D xh = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
    lo = _mm512_fmadd_pd(xl, xl, lo);
    hi = _mm512_fmadd_pd(xh, xh, hi);
  }
  static double reduce_add_f64(D lo, D hi) {
    alignas(64) double lanes[8];
    _mm512_store_pd(lanes, _mm512_add_pd(lo, hi));
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
struct Avx2 {
  using F = __m256;
  static constexpr int kWidth = 8;
  static constexpr const char* kName = "avx2";

  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F zero() { return _mm256_setzero_ps(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static float reduce_add(F a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(F a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  static F load_bf16(const uint16_t* p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void store_bf16(uint16_t* p, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bf16_bits(x));
  }
  // The 8 bf16 values store_bf16 writes.
  static __m128i bf16_bits(F x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m256i qnan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    r = _mm256_blendv_epi8(r, qnan, nan);
    r = _mm256_srli_epi32(r, 16);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
  }
  static F load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_f16(uint16_t* p, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // Streaming stores, as in Avx512 (p aligned to 32 bytes for fp32, 16 for 16-bit).
  static void stream(float* p, F x) { _mm256_stream_ps(p, x); }
  static void stream_bf16(uint16_t* p, F x) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), bf16_bits(x));
  }
  static void stream_f16(uint16_t* p, F x) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static int count_nonfinite(F x) {
    __m256i e = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7f800000));
    __m256i eq = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0x7f800000));
    return __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(eq)));
  }
  static F pow2i(F n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static F round(F x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // torch.sign, as in Avx512.
  static F sign(F x) {
    const F zero = _mm256_setzero_ps();
    const F pos = _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), _mm256_set1_ps(1.0f));
    const F neg = _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_LT_OQ), _mm256_set1_ps(-1.0f));
    const F nan = _mm256_and_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), x);
    return _mm256_or_ps(_mm256_or_ps(pos, neg), nan);
  }

  using D = __m256d;
  static D dzero() { return _mm256_setzero_pd(); }
  static void square_add_f64(F x, D& lo, D& hi) {
    const D xl = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const D xh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    lo = _mm256_fmadd_pd(xl, xl, lo);
    hi = _mm256_fmadd_pd(xh, xh, hi);
  }
  static double reduce_add_f64(D lo, D hi) {
    const D a = _mm256_add_pd(lo, hi);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
  }
};
#endif


// One lane, with the same operations as the vector structs and the same
// rounding (fmadd is a fused multiply-add, conversions round to nearest even),
// so a kernel's tail elements compute bit for bit what a full vector would.
// Kernel files are compiled with -ffp-contract=off so the compiler does not
// fuse separate multiplies and adds on either path.
struct Scalar {
  using F = float;
  static constexpr int kWidth = 1;
  static F load(const float* p) { return *p; }
  static void store(float* p, F x) { *p = x; }
  static F set1(float v) { return v; }
  static F zero() { return 0.0f; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F fmadd(F a, F b, F c) { return __builtin_fmaf(a, b, c); }
  static F sqrt(F a) { return __builtin_sqrtf(a); }
  // max/min with the vector instructions' NaN rule: the second operand wins
  // when either is NaN.
  static F max(F a, F b) { return a > b ? a : b; }
  static F min(F a, F b) { return a < b ? a : b; }
  static float reduce_add(F a) { return a; }
  static float reduce_max(F a) { return a; }
  static F load_bf16(const uint16_t* p) {
    uint32_t u = static_cast<uint32_t>(*p) << 16;
    return __builtin_bit_cast(float, u);
  }
  static void store_bf16(uint16_t* p, F x) {
    uint32_t u = __builtin_bit_cast(uint32_t, x);
    if (x != x) {
      *p = static_cast<uint16_t>((u | 0x00400000u) >> 16);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    *p = static_cast<uint16_t>(u >> 16);
  }
  static F load_f16(const uint16_t* p) { return _cvtsh_ss(*p); }
  static void store_f16(uint16_t* p, F x) {
    *p = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static int count_nonfinite(F x) {
    return (__builtin_bit_cast(uint32_t, x) & 0x7f800000u) == 0x7f800000u ? 1 : 0;
  }
  static F pow2i(F n) {
    uint32_t e = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    return __builtin_bit_cast(float, e);
  }
  static F round(F x) { return __builtin_nearbyintf(x); }
  // torch.sign, as in the vector structs (a NaN comes back as itself).
  static F sign(F x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x != x ? x : 0.0f; }
};

// e^x for every lane, relative error within a few ulp. Inputs are clamped to
// [-87.34, 88.72], so very negative inputs give about 1.2e-38 rather than 0 (harmless
// for softmax, where every input is x - max <= 0 and the sum is >= 1).
template <class V>
inline typename V::F simd_exp(typename V::F x) {
  using F = typename V::F;
  const F hi = V::set1(88.7228391f), lo = V::set1(-87.3365479f);
  F xc = V::min(V::max(x, lo), hi);
  F n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));  // x / ln 2
  // r = x - n ln2, in two parts for accuracy
  F r = V::fmadd(n, V::set1(-0.693359375f), xc);
  r = V::fmadd(n, V::set1(2.12194440e-4f), r);
  // e^r on [-ln2/2, ln2/2]: degree-6 minimax polynomial (Cephes expf)
  F p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  F r2 = V::mul(r, r);
  p = V::fmadd(p, r2, V::add(r, V::set1(1.0f)));
  // Split the scale so n = 128 (x near the top of the range) does not overflow the exponent.
  F n1 = V::round(V::mul(n, V::set1(0.5f)));
  F n2 = V::sub(n, n1);
  return V::mul(V::mul(p, V::pow2i(n1)), V::pow2i(n2));
}

}  // namespace zero::cpu
