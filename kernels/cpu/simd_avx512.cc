// The SIMD kernel table for avx512. This file is compiled with avx512 flags
// (kernels/CMakeLists.txt); everything it instantiates has internal linkage.
#include "kernels/cpu/adamw_impl.h"
#include "kernels/cpu/elementwise_impl.h"
#include "kernels/cpu/lion_impl.h"
#include "kernels/cpu/llama_impl.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/cpu/softmax_impl.h"

namespace zero::cpu {

extern const SimdKernels kAvx512Kernels;
const SimdKernels kAvx512Kernels = {
    .isa = Avx512::kName,
    .add = add_impl<Avx512>,
    .accumulate = accumulate_impl<Avx512>,
    .scale = scale_impl<Avx512>,
    .fill = fill_impl<Avx512>,
    .cast = cast_impl<Avx512>,
    .bias_backward = bias_backward_impl<Avx512>,
    .embedding_forward = embedding_forward_impl<Avx512>,
    .embedding_backward = embedding_backward_impl<Avx512>,
    .add_positional = add_positional_impl<Avx512>,
    .positional_backward = positional_backward_impl<Avx512>,
    .sum_squares = sum_squares_impl<Avx512>,
    .count_nonfinite = count_nonfinite_impl<Avx512>,
    .causal_softmax_forward = causal_softmax_forward_impl<Avx512>,
    .causal_softmax_backward = causal_softmax_backward_impl<Avx512>,
    .cross_entropy = cross_entropy_impl<Avx512>,
    .row_max = row_max_impl<Avx512>,
    .cross_entropy_slice_exp = cross_entropy_slice_exp_impl<Avx512>,
    .cross_entropy_slice_finish = cross_entropy_slice_finish_impl<Avx512>,
    .rmsnorm_forward = rmsnorm_forward_impl<Avx512>,
    .rmsnorm_backward = rmsnorm_backward_impl<Avx512>,
    .rope = rope_impl<Avx512>,
    .swiglu_forward = swiglu_forward_impl<Avx512>,
    .swiglu_backward = swiglu_backward_impl<Avx512>,
    .geglu_forward = geglu_forward_impl<Avx512>,
    .geglu_backward = geglu_backward_impl<Avx512>,
    .softcap_forward = softcap_forward_impl<Avx512>,
    .softcap_backward = softcap_backward_impl<Avx512>,
    .adamw = adamw_impl<Avx512>,
    .adamw_narrow = adamw_narrow_impl<Avx512>,
    .sgd = sgd_impl<Avx512>,
    .lion = lion_impl<Avx512>,
};

}  // namespace zero::cpu
