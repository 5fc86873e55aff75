// The hand-written CPU kernels (what no library does well), as a table of
// function pointers with one instance per ISA: AVX-512 and an AVX2+FMA+F16C
// fallback. simd_kernels() returns the best table this CPU runs, chosen once by
// CPUID; ZE_SIMD=avx2 in the environment forces the fallback (tests run both).
//
// Every kernel is multi-threaded with OpenMP over contiguous ranges and
// vectorised; tails run the same arithmetic one lane wide, so a result never
// depends on where a range boundary falls.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "kernels/optimizer_hyper.h"

namespace zero::cpu {

struct SimdKernels {
  const char* isa;  // "avx512" or "avx2"

  // ---- elementwise (elementwise_impl.h)
  void (*add)(const float* a, const float* b, float* out, int64_t n);
  void (*accumulate)(void* dst, DType dst_dtype, const float* src, int64_t n);
  void (*scale)(void* x, DType dtype, float s, int64_t n);
  void (*fill)(void* x, DType dtype, float v, int64_t n);
  void (*cast)(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
  void (*bias_backward)(const float* dy, int64_t rows, int64_t cols, void* dbias, DType dtype);
  // Row ids[r] - first of the table. rows >= 0: the table is the slice of
  // rows [first, first + rows) of a vocabulary-parallel embedding, and an id
  // outside it is another rank's (forward writes zeros, backward adds
  // nothing); rows < 0: every id is in the table.
  void (*embedding_forward)(const int32_t* ids, int64_t n, const void* table, DType dtype,
                            int64_t cols, float* out, int64_t first, int64_t rows);
  void (*embedding_backward)(const int32_t* ids, int64_t n, const float* dout, int64_t cols,
                             void* dtable, DType dtype, int64_t first, int64_t rows);
  void (*add_positional)(float* x, int64_t batch, int64_t seq, int64_t cols, const void* table,
                         DType dtype);
  void (*positional_backward)(const float* dy, int64_t batch, int64_t seq, int64_t cols,
                              void* dtable, DType dtype);
  double (*sum_squares)(const void* x, DType dtype, int64_t n);
  int64_t (*count_nonfinite)(const void* x, DType dtype, int64_t n);

  // ---- softmax family (softmax_impl.h)
  void (*causal_softmax_forward)(const float* scores, float* probs, int64_t rows_bh, int64_t seq);
  void (*causal_softmax_backward)(const float* probs, const float* dprobs, float* dscores,
                                  int64_t rows_bh, int64_t seq);
  void (*cross_entropy)(float* logits, const int32_t* targets, int64_t n, int64_t vocab,
                        float grad_scale, float* losses);
  // The vocabulary-parallel cross-entropy's phases (Ops::row_max and the
  // cross_entropy_slice_* ops).
  void (*row_max)(const float* x, int64_t n, int64_t cols, float* out);
  void (*cross_entropy_slice_exp)(float* logits, const int32_t* targets, int64_t n, int64_t cols,
                                  int64_t first, const float* max, float* sums);
  void (*cross_entropy_slice_finish)(float* probs, const int32_t* targets, int64_t n, int64_t cols,
                                     int64_t first, const float* max, const float* sums, float grad_scale,
                                     float* losses);

  // ---- the Llama family (llama_impl.h); see Ops for the contracts
  // gamma_offset: 0, or 1 for Gemma's (1 + gamma).
  void (*rmsnorm_forward)(const float* x, const void* gamma, DType gamma_dtype, float gamma_offset, float eps,
                          float* y, float* rstd, int64_t rows, int64_t cols);
  void (*rmsnorm_backward)(const float* dy, const float* x, const void* gamma, DType gamma_dtype,
                           float gamma_offset, const float* rstd, float* dx, void* dgamma, DType dgamma_dtype,
                           int64_t rows, int64_t cols);
  // x, y [bh, seq, 2 half]; inv_freq [half], half <= 256.
  void (*rope)(const float* x, float* y, int64_t bh, int64_t seq, int64_t half, const float* inv_freq,
               int64_t first_position, bool inverse);
  void (*swiglu_forward)(const float* gate, const float* up, float* h, int64_t n);
  void (*swiglu_backward)(const float* gate, const float* up, const float* dh, float* dgate, float* dup,
                          int64_t n);
  void (*geglu_forward)(const float* gate, const float* up, float* h, int64_t n);
  void (*geglu_backward)(const float* gate, const float* up, const float* dh, float* dgate, float* dup,
                         int64_t n);
  void (*softcap_forward)(const float* x, float cap, float* y, int64_t n);
  void (*softcap_backward)(const float* y, const float* dy, float cap, float* dx, int64_t n);

  // ---- optimizers (adamw_impl.h, lion_impl.h)
  void (*adamw)(float* master, const void* grad, DType grad_dtype, float* m, float* v,
                void* param_out, DType param_dtype, int64_t n, const AdamWHyper& hyper);
  // The same over bf16/fp16 master weights (grad and param_out in their
  // dtype, param_out nullable) with fp32 or (under bf16) bf16 moments.
  void (*adamw_narrow)(void* master, DType master_dtype, void* m, void* v, DType state_dtype, const void* grad,
                       void* param_out, int64_t n, const AdamWHyper& hyper);
  void (*sgd)(float* master, const void* grad, DType grad_dtype, float* momentum_buf,
              void* param_out, DType param_dtype, int64_t n, const SgdHyper& hyper);
  void (*lion)(float* master, const void* grad, DType grad_dtype, float* exp_avg, void* param_out,
               DType param_dtype, int64_t n, const LionHyper& hyper);
};

// The table for this CPU (AVX-512 when present, else AVX2); aborts with a
// clear message on a CPU without AVX2.
const SimdKernels& simd_kernels();
// A table by name ("avx512", "avx2"), or nullptr when the CPU cannot run it.
const SimdKernels* simd_kernels_for(std::string_view isa);

}  // namespace zero::cpu
