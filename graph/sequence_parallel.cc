// Megatron's sequence parallelism; see sequence_parallel.h.
#include "graph/sequence_parallel.h"

#include "graph/functional.h"

namespace zero {

Tensor SequenceParallelLayerNorm::forward(Context& ctx, const Tensor& x) {
  return fn::layer_norm(ctx, x, *weight(), *bias(), eps(), &group_);
}

Tensor SequenceParallelRmsNorm::forward(Context& ctx, const Tensor& x) {
  return fn::rms_norm(ctx, x, *weight(), eps(), &group_);
}

SequenceParallelPositionalEmbedding::SequenceParallelPositionalEmbedding(std::string name, int64_t max_positions,
                                                                         int64_t dim, float init_std,
                                                                         Communicator& group)
    : Module(std::move(name)), group_(group) {
  weight_ = add_parameter("weight", {max_positions, dim}, ParamInit::normal(init_std));
}

// A shard holds positions [r S', (r + 1) S') of each sample.
Tensor SequenceParallelPositionalEmbedding::forward(Context& ctx, const Tensor& x) {
  return fn::add_positional(ctx, x, *weight_, group_.rank() * x.dim(1), &group_);
}

}  // namespace zero
