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
// (in their backward, before the engine reduces them over the data group).
#pragma once

#include <string>

#include "comm/communicator.h"
#include "graph/context.h"
#include "graph/layers.h"

namespace zero {

// shard [B, S/T, C] of every rank -> [B, S, C] (all-gather along the sequence).
Tensor gather_sequence(Context& ctx, Communicator& group, const Tensor& shard, const std::string& name);
// full [B, S, C] partial sums of every rank -> this rank's shard of their sum
// [B, S/T, C] (reduce-scatter along the sequence).
Tensor scatter_sequence(Context& ctx, Communicator& group, const Tensor& full, const std::string& name);

// LayerNorm on a sequence shard: its weight and bias gradients are summed
// over the group. Saves: x (the shard), mean, var.
class SequenceParallelLayerNorm : public LayerNorm {
 public:
  SequenceParallelLayerNorm(std::string name, int64_t features, Communicator& group)
      : LayerNorm(std::move(name), features), group_(group) {}
  Tensor backward(Context& ctx, const Tensor& dy) override;

 private:
  Communicator& group_;
};

// RmsNorm on a sequence shard: its weight gradient is summed over the group.
class SequenceParallelRmsNorm : public RmsNorm {
 public:
  SequenceParallelRmsNorm(std::string name, int64_t features, float eps, Communicator& group)
      : RmsNorm(std::move(name), features, eps), group_(group) {}
  Tensor backward(Context& ctx, const Tensor& dy) override;

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
  Tensor backward(Context& ctx, const Tensor& dy) override;

 private:
  Communicator& group_;
  int64_t max_positions_, dim_;
  Parameter* weight_;
};

// Runs `backward` with the gradients of `params` (those defined) redirected
// into zeroed buffers of their dtype, sums those over the group and adds them
// to the gradients: a gradient computed from this rank's tokens only becomes
// the whole sequence's on every rank of the group.
Tensor backward_summing_gradients(Context& ctx, Communicator& group, std::initializer_list<Parameter*> params,
                                  const std::string& name, const std::function<Tensor()>& backward);

}  // namespace zero
