// GEMMs on the CPU through oneDNN's matmul primitive: fp32, and bf16 inputs
// with fp32 accumulation (brgemm on AVX512-BF16 / AMX) — or, where fp32 is
// the faster GEMM on this CPU, bf16 operands widened to fp32
// (bf16_gemm_policy.h). Primitives are built
// once per shape and cached. Operands not already in the GEMM dtype are cast
// into the workspace first; an output dtype oneDNN cannot write directly is
// staged in fp32. Scratchpads are user-managed, so they are tracked too.
//
// An fp32 GEMM whose reduction is long and whose output is small (K >= 8192
// and K > 4·max(M, N): the LM head's data gradient, dX = dLogits · W over the
// vocabulary) runs as a sum of GEMMs over K slices of about 3072, each adding
// into C. What it buys is oneDNN's kernel, not the slicing: oneDNN 2.6 gives
// a dense fp32 matmul its brgemm kernel (and next_impl() offers no other),
// which on a 256 x 768 output over K = 50304 runs at 0.59 of the FMA peak;
// a K slice of a row-major operand has a row stride wider than the slice,
// and for that oneDNN runs its gemm:jit (sgemm) kernel, at 0.93 here
// (bench/gpt_step_bench BM_Gemm/lm_head/fp32/dgrad; one strided call over
// the whole K runs as fast, but needs a padded copy). A oneDNN whose brgemm
// takes strided operands would silently give the gain back; that benchmark's
// ratio_to_peak is where it shows. The sum is still fp32; only its order
// changes.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/container/node_hash_map.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/workspace_arena.h"
#include "kernels/ops.h"

namespace zero::cpu {

class OneDnnMatmul {
 public:
  // dry_run: run() checks shapes and carves the workspace it would use
  // (oneDNN's scratchpad included), then returns without touching memory;
  // primitives are described, not built (the memory planner's ops).
  explicit OneDnnMatmul(WorkspaceArena& workspace, bool dry_run = false)
      : workspace_(workspace), dry_run_(dry_run) {}

  void run(const Tensor& a, const Tensor& b, const Tensor& c, const MatmulSpec& spec,
           const Tensor& bias);

 private:
  struct Key {
    int64_t batch, m, n, k;
    int64_t k_stride;  // the stored K: A's row length (B's, transposed); > k for a K slice
    bool trans_a, trans_b, accumulate, has_bias;
    DType gemm, out;
    float alpha;
    bool operator==(const Key&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.batch, k.m, k.n, k.k, k.k_stride, k.trans_a, k.trans_b,
                        k.accumulate, k.has_bias, k.gemm, k.out, k.alpha);
    }
  };
  struct Entry {
    dnnl::matmul primitive;
    dnnl::memory::desc a_md, b_md, c_md, bias_md, scratch_md;
  };

  // The cached primitive for `key`; references stay valid across lookups
  // (a node map), so the slices of one call can hold theirs.
  const Entry& lookup(const Key& key);

  WorkspaceArena& workspace_;
  bool dry_run_;
  absl::node_hash_map<Key, Entry> cache_;
};

}  // namespace zero::cpu
