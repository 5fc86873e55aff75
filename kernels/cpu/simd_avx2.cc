// The SIMD kernel table for avx2. This file is compiled with avx2 flags
// (kernels/CMakeLists.txt); everything it instantiates has internal linkage.
#include "kernels/cpu/adamw_impl.h"
#include "kernels/cpu/elementwise_impl.h"
#include "kernels/cpu/lion_impl.h"
#include "kernels/cpu/llama_impl.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/cpu/softmax_impl.h"

namespace zero::cpu {

extern const SimdKernels kAvx2Kernels;
const SimdKernels kAvx2Kernels = {
    .isa = Avx2::kName,
    .add = add_impl<Avx2>,
    .accumulate = accumulate_impl<Avx2>,
    .scale = scale_impl<Avx2>,
    .fill = fill_impl<Avx2>,
    .cast = cast_impl<Avx2>,
    .bias_backward = bias_backward_impl<Avx2>,
    .embedding_forward = embedding_forward_impl<Avx2>,
    .embedding_backward = embedding_backward_impl<Avx2>,
    .add_positional = add_positional_impl<Avx2>,
    .positional_backward = positional_backward_impl<Avx2>,
    .sum_squares = sum_squares_impl<Avx2>,
    .count_nonfinite = count_nonfinite_impl<Avx2>,
    .causal_softmax_forward = causal_softmax_forward_impl<Avx2>,
    .causal_softmax_backward = causal_softmax_backward_impl<Avx2>,
    .cross_entropy = cross_entropy_impl<Avx2>,
    .row_max = row_max_impl<Avx2>,
    .cross_entropy_slice_exp = cross_entropy_slice_exp_impl<Avx2>,
    .cross_entropy_slice_finish = cross_entropy_slice_finish_impl<Avx2>,
    .rmsnorm_forward = rmsnorm_forward_impl<Avx2>,
    .rmsnorm_backward = rmsnorm_backward_impl<Avx2>,
    .rope = rope_impl<Avx2>,
    .swiglu_forward = swiglu_forward_impl<Avx2>,
    .swiglu_backward = swiglu_backward_impl<Avx2>,
    .geglu_forward = geglu_forward_impl<Avx2>,
    .geglu_backward = geglu_backward_impl<Avx2>,
    .softcap_forward = softcap_forward_impl<Avx2>,
    .softcap_backward = softcap_backward_impl<Avx2>,
    .adamw = adamw_impl<Avx2>,
    .adamw_narrow = adamw_narrow_impl<Avx2>,
    .sgd = sgd_impl<Avx2>,
    .lion = lion_impl<Avx2>,
};

}  // namespace zero::cpu
