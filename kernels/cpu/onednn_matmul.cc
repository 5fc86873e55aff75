// oneDNN matmul wrapper; see onednn_matmul.h.
#include "kernels/cpu/onednn_matmul.h"

#include <algorithm>

#include "kernels/cpu/bf16_gemm_policy.h"
#include "kernels/cpu/onednn_context.h"

namespace zero::cpu {

namespace {

using dims = dnnl::memory::dims;

// Row-major [batch?, rows, cols] as stored, each row `ld` elements apart (a
// column slice of a wider matrix when ld > cols); `transposed` describes the
// logical [cols, rows] view of it, which is how oneDNN expresses A^T / B^T.
dnnl::memory::desc matrix_md(int64_t batch, int64_t rows, int64_t cols, bool transposed, DType t,
                             int64_t ld = 0) {
  const auto dt = to_dnnl(t);
  if (ld == 0) ld = cols;
  if (!transposed) {
    if (batch == 0) return dnnl::memory::desc(dims{rows, cols}, dt, dims{ld, 1});
    return dnnl::memory::desc(dims{batch, rows, cols}, dt, dims{rows * ld, ld, 1});
  }
  if (batch == 0) return dnnl::memory::desc(dims{cols, rows}, dt, dims{1, ld});
  return dnnl::memory::desc(dims{batch, cols, rows}, dt, dims{rows * ld, 1, ld});
}

// K slices for a GEMM with a long reduction and a small output (see the
// header): their count, 1 when the GEMM runs whole.
constexpr int64_t kSliceMinK = 8192, kSliceK = 3072;
int64_t k_slices(int64_t batch, int64_t m, int64_t n, int64_t k, DType gemm, DType out) {
  if (batch != 0 || gemm != DType::kF32 || out != DType::kF32) return 1;
  if (k < kSliceMinK || k <= 4 * std::max(m, n)) return 1;
  return (k + kSliceK - 1) / kSliceK;
}

}  // namespace

const OneDnnMatmul::Entry& OneDnnMatmul::lookup(const Key& key) {
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  Entry e;
  // A logical [M, K]: stored [M, K], or [K, M] when transposed; B logical
  // [K, N]: stored [K, N], or [N, K]. A K slice of a stored [., K] keeps its
  // row length k_stride.
  e.a_md = key.trans_a ? matrix_md(key.batch, key.k, key.m, true, key.gemm)
                       : matrix_md(key.batch, key.m, key.k, false, key.gemm, key.k_stride);
  e.b_md = key.trans_b ? matrix_md(key.batch, key.n, key.k, true, key.gemm, key.k_stride)
                       : matrix_md(key.batch, key.k, key.n, false, key.gemm);
  e.c_md = matrix_md(key.batch, key.m, key.n, false, key.out);
  if (key.has_bias) {
    e.bias_md = key.batch == 0
                    ? dnnl::memory::desc(dims{1, key.n}, dnnl::memory::data_type::f32, dims{key.n, 1})
                    : dnnl::memory::desc(dims{1, 1, key.n}, dnnl::memory::data_type::f32,
                                         dims{key.n, key.n, 1});
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  OneDnn& ctx = OneDnn::get();
  auto desc = key.has_bias ? dnnl::matmul::desc(e.a_md, e.b_md, e.bias_md, e.c_md)
                           : dnnl::matmul::desc(e.a_md, e.b_md, e.c_md);
  dnnl::matmul::primitive_desc pd(desc, attr, ctx.engine);
  e.scratch_md = pd.scratchpad_desc();
  if (!dry_run_) e.primitive = dnnl::matmul(pd);
  return cache_.emplace(key, std::move(e)).first->second;
}

void OneDnnMatmul::run(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
                       const Tensor& bias) {
  const MatmulDims dims = matmul_dims(a, b, c, spec, bias);
  const int64_t batch = dims.batch, m = dims.m, n = dims.n, k = dims.k;

  // fp16 GEMMs need avx512_core_fp16, which these CPUs lack: they run as fp32.
  // bf16 ones run in bf16 unless fp32 is faster here (bf16_gemm_policy.h).
  const DType gemm = spec.compute == DType::kBF16 ? bf16_gemm_choice().gemm : DType::kF32;
  const bool direct_out = c.dtype() == DType::kF32 || c.dtype() == gemm;
  const DType out = direct_out ? c.dtype() : DType::kF32;

  // One GEMM, or K slices: the first as asked (bias included), the rest adding
  // into C. Slices are equal but the last; at most three distinct primitives.
  const int64_t slices = k_slices(batch, m, n, k, gemm, out);
  const int64_t slice_k = slices == 1 ? k : (k + slices - 1) / slices;
  const bool accumulate = spec.accumulate && direct_out;
  auto slice_key = [&](int64_t s) {
    const int64_t ks = std::min(slice_k, k - s * slice_k);
    return Key{batch, m, n, ks, k, spec.trans_a, spec.trans_b, s > 0 || accumulate,
               bias.defined() && s == 0, gemm, out, spec.alpha};
  };
  const Entry& e = lookup(slice_key(0));
  size_t scratch = e.scratch_md.get_size();
  if (slices > 1) {  // the other two primitives: slice 1's (the middle ones') and the last's
    scratch = std::max({scratch, lookup(slice_key(1)).scratch_md.get_size(),
                        lookup(slice_key(slices - 1)).scratch_md.get_size()});
  }

  const SimdKernels& simd = simd_kernels();
  const size_t gemm_size = dtype_size(gemm);
  const size_t sizes[5] = {
      a.dtype() == gemm ? 0 : static_cast<size_t>(a.numel()) * gemm_size,
      b.dtype() == gemm ? 0 : static_cast<size_t>(b.numel()) * gemm_size,
      bias.defined() && bias.dtype() != DType::kF32 ? static_cast<size_t>(n) * 4 : 0,
      direct_out ? 0 : static_cast<size_t>(c.numel()) * 4,
      scratch,
  };
  void* buf[5];
  workspace_.carve(sizes, buf);
  if (dry_run_) return;
  void* a_ptr = a.data();
  void* b_ptr = b.data();
  void* bias_ptr = bias.defined() ? bias.data() : nullptr;
  void* c_ptr = direct_out ? c.data() : buf[3];
  if (buf[0] != nullptr) simd.cast(a.data(), a.dtype(), a_ptr = buf[0], gemm, a.numel());
  if (buf[1] != nullptr) simd.cast(b.data(), b.dtype(), b_ptr = buf[1], gemm, b.numel());
  if (buf[2] != nullptr) simd.cast(bias.data(), bias.dtype(), bias_ptr = buf[2], DType::kF32, n);

  OneDnn& ctx = OneDnn::get();
  for (int64_t s = 0; s < slices; ++s) {
    const Entry& es = s == 0 ? e : lookup(slice_key(s));
    // Slice s starts at column s·slice_k of a stored [., K] operand, at row
    // s·slice_k of a stored [K, .] one.
    const int64_t k0 = s * slice_k;
    char* a_s = static_cast<char*>(a_ptr) + (spec.trans_a ? k0 * m : k0) * gemm_size;
    char* b_s = static_cast<char*>(b_ptr) + (spec.trans_b ? k0 : k0 * n) * gemm_size;
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, dnnl::memory(es.a_md, ctx.engine, a_s)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(es.b_md, ctx.engine, b_s)},
        {DNNL_ARG_DST, dnnl::memory(es.c_md, ctx.engine, c_ptr)},
    };
    if (buf[4] != nullptr) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(es.scratch_md, ctx.engine, buf[4]));
    if (s == 0 && bias_ptr != nullptr) args.emplace(DNNL_ARG_BIAS, dnnl::memory(es.bias_md, ctx.engine, bias_ptr));
    es.primitive.execute(ctx.stream, args);
  }
  ctx.stream.wait();

  if (!direct_out) {
    if (spec.accumulate) simd.accumulate(c.data(), c.dtype(), static_cast<float*>(c_ptr), c.numel());
    else simd.cast(c_ptr, DType::kF32, c.data(), c.dtype(), c.numel());
  }
}

}  // namespace zero::cpu
