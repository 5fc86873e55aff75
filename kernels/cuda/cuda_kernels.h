// Host-side launchers of the CUDA kernels, grouped by the .cu file that
// defines them. This is the seam between CudaOps (shape checks, workspace,
// plain C++) and the kernels (nvcc): raw device pointers, element counts and
// the stream to launch on.
//
// Every launcher is asynchronous: it enqueues work on `stream` and returns.
// Pointers must stay valid until that work has completed (stream order on the
// compute stream makes this automatic for CudaOps' own buffers). A launcher
// given 0 elements enqueues nothing. Launchers that take a `workspace` need
// the number of bytes the matching *_workspace_bytes() function returns, in
// device memory that no other work on the stream uses until they complete.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/dropout_mask.h"
#include "kernels/optimizer_hyper.h"
#include "kernels/rope.h"

namespace zero::cuda {

// ---- elementwise.cu: fp32 activations, any-float-dtype parameters and gradients.
void launch_add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void launch_accumulate(void* dst, DType dst_dtype, const float* src, int64_t n,
                       cudaStream_t stream);
void launch_scale(void* x, DType dtype, float s, int64_t n, cudaStream_t stream);
void launch_fill(void* x, DType dtype, float v, int64_t n, cudaStream_t stream);
// Same dtype: a device-to-device copy. Otherwise convert (round to nearest even).
void launch_cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                 cudaStream_t stream);
// dst = keep ? src * dropout_scale(p) : 0 over [b, t, c] in `dtype` (dst may
// be src), the mask of kernels/dropout_mask.h under key.
void launch_dropout(const void* src, void* dst, DType dtype, int64_t b, int64_t t, int64_t c, float p,
                    const DropoutKey& key, cudaStream_t stream);
// c[r, j] += bias[j] for a row-major fp32 [rows, cols] matrix.
void launch_add_bias_rows(float* c, int64_t rows, int64_t cols, const void* bias,
                          DType bias_dtype, cudaStream_t stream);

// ---- norm_activation.cu
void launch_layernorm_forward(const float* x, const void* gamma, DType gamma_dtype,
                              const void* beta, DType beta_dtype, float eps, int64_t rows,
                              int64_t cols, float* y, float* mean, float* var,
                              cudaStream_t stream);
size_t layernorm_backward_workspace_bytes(int64_t rows, int64_t cols);
// dx overwritten; dgamma, dbeta accumulated (any float dtype).
void launch_layernorm_backward(const float* dy, const float* x, const void* gamma,
                               DType gamma_dtype, const float* mean, const float* var, float eps,
                               int64_t rows, int64_t cols, float* dx, void* dgamma,
                               DType dgamma_dtype, void* dbeta, DType dbeta_dtype,
                               void* workspace, cudaStream_t stream);
void launch_gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
void launch_gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                          cudaStream_t stream);

// ---- llama_ops.cu: RMSNorm, rotary embeddings, SwiGLU (fp32 activations).
// rstd [rows] is written by the forward and read by the backward.
// gamma_offset: 0, or 1 for Gemma's (1 + gamma).
void launch_rmsnorm_forward(const float* x, const void* gamma, DType gamma_dtype, float gamma_offset, float eps,
                            int64_t rows, int64_t cols, float* y, float* rstd, cudaStream_t stream);
size_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t cols);
// dx overwritten (it may be dy or x); dgamma accumulated (any float dtype).
void launch_rmsnorm_backward(const float* dy, const float* x, const void* gamma, DType gamma_dtype,
                             float gamma_offset, const float* rstd, int64_t rows, int64_t cols, float* dx,
                             void* dgamma, DType dgamma_dtype, void* workspace, cudaStream_t stream);
// x, y [rows, 2 * freqs.half] with rows = B * H * T, row r at position
// first_position + r % seq; inverse rotates by -angle. y may be x.
void launch_rope(const float* x, float* y, int64_t rows, int64_t seq, const RopeFreqs& freqs,
                 int64_t first_position, bool inverse, cudaStream_t stream);
// h = silu(gate) * up (h may alias gate or up).
void launch_swiglu_forward(const float* gate, const float* up, float* h, int64_t n, cudaStream_t stream);
// dgate = dh * up * silu'(gate), dup = dh * silu(gate); the outputs may alias the inputs.
void launch_swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup,
                            int64_t n, cudaStream_t stream);
// h = gelu_tanh(gate) * up, and its backward (as the SwiGLU pair; may alias).
void launch_geglu_forward(const float* gate, const float* up, float* h, int64_t n, cudaStream_t stream);
void launch_geglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup,
                           int64_t n, cudaStream_t stream);
// The same two over a fused gate/up projection's output gate_up [rows, 2f]
// (each row: its gate's f features, then its up's) into h [rows, f], and
// back into dgate_up of gate_up's layout (which may alias gate_up): one
// launch for all rows.
void launch_glu_rows_forward(bool geglu, const float* gate_up, float* h, int64_t rows, int64_t f,
                             cudaStream_t stream);
void launch_glu_rows_backward(bool geglu, const float* gate_up, const float* dh, float* dgate_up, int64_t rows,
                              int64_t f, cudaStream_t stream);
// y = cap tanh(x / cap) (y may be x); dx = dy (1 - (y / cap)^2) (dx may be dy).
void launch_softcap_forward(const float* x, float cap, float* y, int64_t n, cudaStream_t stream);
void launch_softcap_backward(const float* y, const float* dy, float cap, float* dx, int64_t n, cudaStream_t stream);

// ---- reduce.cu
// dst[c] += sum_r x[r, c] over a row-major fp32 [rows, cols] matrix; rows are
// summed in fixed chunks and the chunks in order (deterministic, no atomics).
size_t column_sums_workspace_bytes(int64_t rows, int64_t cols);
void launch_column_sums_accumulate(const float* x, int64_t rows, int64_t cols, void* dst,
                                   DType dst_dtype, void* workspace, cudaStream_t stream);
size_t sum_squares_workspace_bytes();
// *result (device) = sum of x^2 in double.
void launch_sum_squares(const void* x, DType dtype, int64_t n, double* result, void* workspace,
                        cudaStream_t stream);
// *result (device) = number of inf/NaN elements.
void launch_count_nonfinite(const void* x, DType dtype, int64_t n,
                            unsigned long long* result, cudaStream_t stream);

// ---- attention.cu: scores/probs [bh, seq, seq]; q/k/v [b, h, t, d].
void launch_causal_softmax_forward(const float* scores, float* probs, int64_t bh, int64_t seq,
                                   cudaStream_t stream);
void launch_causal_softmax_backward(const float* probs, const float* dprobs, float* dscores,
                                    int64_t bh, int64_t seq, cudaStream_t stream);
void launch_split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
                      int64_t heads, int64_t kv_heads, int64_t head_dim, cudaStream_t stream);
void launch_merge_qkv(const float* dq, const float* dk, const float* dv, float* dqkv,
                      int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      cudaStream_t stream);
// dst[a, c, b, d] = src[a, b, c, d]
void launch_transpose12(const float* src, float* dst, int64_t a, int64_t b, int64_t c, int64_t d,
                        cudaStream_t stream);

// ---- embedding.cu
// Row ids[r] - first of the table [vocab, cols]. Unsliced (first 0), ids must
// lie in [0, vocab); an id outside traps the kernel (the context is then lost
// and the next CUDA call aborts naming the launch failure). Sliced (a
// vocabulary-parallel table of rows [first, first + vocab)), an id outside
// is another rank's: a zero row forward, no gradient backward.
void launch_embedding_forward(const int32_t* ids, int64_t n, const void* table, DType table_dtype,
                              int64_t vocab, int64_t cols, float* out, int64_t first, bool sliced,
                              cudaStream_t stream);
// dtable[ids[r]] += dout[r] for r in row order, rounding after each add
// (bit-identical to the CPU kernel); n < 2^31, cols < 65536 * 256.
size_t embedding_backward_workspace_bytes(int64_t n, int64_t vocab, bool sliced);
void launch_embedding_backward(const int32_t* ids, int64_t n, const float* dout, int64_t cols,
                               void* dtable, DType dtable_dtype, int64_t vocab, int64_t first, bool sliced,
                               void* workspace, cudaStream_t stream);
void launch_add_positional(float* x, int64_t batch, int64_t seq, int64_t cols, const void* table,
                           DType table_dtype, cudaStream_t stream);

// ---- loss.cu: logits [n, vocab] overwritten with the scaled gradient.
// A target >= vocab traps the kernel (see embedding ids).
void launch_cross_entropy(float* logits, const int32_t* targets, int64_t n, int64_t vocab,
                          float grad_scale, float* losses, cudaStream_t stream);
// The vocabulary-parallel cross-entropy's phases (Ops::row_max and the
// cross_entropy_slice_* ops), one block per row of x [n, cols].
void launch_row_max(const float* x, int64_t n, int64_t cols, float* max, cudaStream_t stream);
void launch_cross_entropy_slice_exp(float* logits, const int32_t* targets, int64_t n, int64_t cols, int64_t first,
                                    const float* max, float* sums, cudaStream_t stream);
void launch_cross_entropy_slice_finish(float* probs, const int32_t* targets, int64_t n, int64_t cols,
                                       int64_t first, const float* max, const float* sums, float grad_scale,
                                       float* losses, cudaStream_t stream);

// ---- optimizer.cu: param_out may be null (then param_dtype is ignored);
// momentum_buf may be null when hyper.momentum == 0; Lion's exp_avg may not.
void launch_adamw(float* master, const void* grad, DType grad_dtype, float* m, float* v,
                  void* param_out, DType param_dtype, int64_t n, const AdamWHyper& hyper,
                  cudaStream_t stream);
void launch_sgd(float* master, const void* grad, DType grad_dtype, float* momentum_buf,
                void* param_out, DType param_dtype, int64_t n, const SgdHyper& hyper,
                cudaStream_t stream);
void launch_lion(float* master, const void* grad, DType grad_dtype, float* exp_avg, void* param_out,
                 DType param_dtype, int64_t n, const LionHyper& hyper, cudaStream_t stream);

// ---- moe.cu: the mixture-of-experts ops (kernels/ops.h), fp32 and int32.
void launch_moe_router_forward(const float* logits, int64_t n, int64_t e, int64_t k, bool renormalize, float* probs,
                               int32_t* indices, float* weights, float* lse, cudaStream_t stream);
// extra: nullptr or [e].
void launch_moe_router_backward(const float* probs, const int32_t* indices, const float* dweights, int64_t n,
                                int64_t e, int64_t k, bool renormalize, const float* extra, float z_scale,
                                const float* lse, float* dlogits, cudaStream_t stream);
void launch_gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t c, float* out, cudaStream_t stream);
void launch_scatter_add_rows(const float* dy, const int32_t* rows, int64_t m, int64_t c, float* dx,
                             cudaStream_t stream);
void launch_moe_combine(const float* h, const int32_t* rows, const int32_t* slots, const float* weights, int64_t m,
                        int64_t c, float* y, cudaStream_t stream);
void launch_moe_combine_backward(const float* dy, const float* h, const int32_t* rows, const int32_t* slots,
                                 const float* weights, int64_t m, int64_t c, float* dh, float* dweights,
                                 cudaStream_t stream);
void launch_sigmoid_gate_forward(const float* g, const float* x, int64_t n, int64_t c, float* y, cudaStream_t stream);
void launch_sigmoid_gate_backward(const float* g, const float* x, const float* dy, int64_t n, int64_t c, float* dg,
                                  float* dx, cudaStream_t stream);

}  // namespace zero::cuda
