// Megatron's sequence parallelism (Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models"): between the tensor-parallel
// regions the activations [B, S, C] are split along the sequence over the
// tensor group, rank r holding positions [r S/T, (r + 1) S/T) of every sample
// ([B, S/T, C]), so the layer norms, dropouts and residual adds run on 1/T of
// the tokens and keep 1/T of the activations. The all-reduce after a
// row-parallel layer becomes a reduce-scatter along the sequence, and the
// input of a column-parallel layer is all-gathered first (its backward
// reduce-scatters dx); each moves (T-1)/T of what the all-reduce moved, so
// the volume is the same. S must divide by T.
//
// The layer norms and the position table are whole on every rank but see
// only this rank's tokens, so their gradients are summed over the group
// (in their ops' rules, graph/functional.h's sum_grads_over, before the
// engine reduces them over the data group). The collectives along the
// sequence are graph/collective_ops.h's gather_sequence / scatter_sequence.
// All write forward only.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "graph/context.h"
#include "graph/layers.h"

namespace zero {

// LayerNorm on a sequence shard: its weight and bias gradients are summed
// over the group. Saves: x (the shard), mean, var.
class SequenceParallelLayerNorm : public LayerNorm {
 public:
  SequenceParallelLayerNorm(std::string name, int64_t features, Communicator& group)
      : LayerNorm(std::move(name), features), group_(group) {}
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Communicator& group_;
};

// RmsNorm on a sequence shard: its weight gradient is summed over the group.
class SequenceParallelRmsNorm : public RmsNorm {
 public:
  SequenceParallelRmsNorm(std::string name, int64_t features, float eps, Communicator& group)
      : RmsNorm(std::move(name), features, eps), group_(group) {}
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Communicator& group_;
};

// Learned positions added to a sequence shard: rank r adds rows [r S', (r +
// 1) S') of the table to its [B, S', C]; the table's gradient is summed over
// the group. Saves nothing.
class SequenceParallelPositionalEmbedding : public Module {
 public:
  SequenceParallelPositionalEmbedding(std::string name, int64_t max_positions, int64_t dim, float init_std,
                                      Communicator& group);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Communicator& group_;
  Parameter* weight_;
};

}  // namespace zero
