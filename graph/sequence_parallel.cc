// Megatron's sequence parallelism; see sequence_parallel.h.
#include "graph/sequence_parallel.h"

#include "core/status.h"
#include "core/strings.h"

namespace zero {

namespace {

void note_failure(Context& ctx, absl::Status s, const std::string& name, const char* what) {
  if (!s.ok()) ctx.note(annotate(s, cat(name, ": sequence-parallel ", what)));
}

}  // namespace

// Along the sequence the shards are not contiguous in [B, S, C] (each sample
// holds one piece of each rank's), so the collectives run on a rank-major
// buffer [T, B, S/T * C] and transpose12 moves between the two orders.
Tensor gather_sequence(Context& ctx, Communicator& group, const Tensor& shard, const std::string& name) {
  const int t = group.world_size();
  if (t == 1) return shard;
  const int64_t b = shard.dim(0), piece = shard.dim(1) * shard.dim(2), block = b * piece;
  Tensor ranks = ctx.activation({1, t, b, piece});
  ctx.backend().copy(ranks.slice(group.rank() * block, {block}), shard.view({block}));
  note_failure(ctx, group.all_gather(ranks.data(), block, block, ranks.dtype()), name, "all-gather");
  Tensor full = ctx.activation({b, shard.dim(1) * t, shard.dim(2)});
  ctx.ops().transpose12(ranks, full.view({1, b, t, piece}));
  return full;
}

Tensor scatter_sequence(Context& ctx, Communicator& group, const Tensor& full, const std::string& name) {
  const int t = group.world_size();
  if (t == 1) return full;
  ZE_CHECK(full.ndim() == 3 && full.dim(1) % t == 0)
      << name << ": a sequence of " << full.dim(1) << " does not split over a tensor group of " << t;
  const int64_t b = full.dim(0), s = full.dim(1) / t, piece = s * full.dim(2), block = b * piece;
  Tensor ranks = ctx.activation({1, t, b, piece});
  ctx.ops().transpose12(full.view({1, b, t, piece}), ranks);
  Tensor shard = ctx.activation({b, s, full.dim(2)});
  note_failure(ctx, group.reduce_scatter(ranks.data(), shard.data(), std::vector<int64_t>(t, block), ranks.dtype()),
               name, "reduce-scatter");
  return shard;
}

Tensor backward_summing_gradients(Context& ctx, Communicator& group, std::initializer_list<Parameter*> params,
                                  const std::string& name, const std::function<Tensor()>& backward) {
  std::vector<std::pair<Parameter*, Tensor>> redirected;  // (parameter, its real gradient)
  for (Parameter* p : params) {
    if (p == nullptr || !p->grad.defined()) continue;
    Tensor mine = ctx.backend().zeros(p->grad.shape(), p->grad.dtype(), MemCategory::kGradients);
    redirected.emplace_back(p, std::exchange(p->grad, mine));
  }
  Tensor dx = backward();
  for (auto& [p, grad] : redirected) {
    Tensor mine = std::exchange(p->grad, grad);
    note_failure(ctx, group.all_reduce(mine.data(), mine.numel(), mine.dtype(), ReduceOp::kSum), name,
                 "all-reduce of a replicated gradient");
    if (mine.dtype() == DType::kF32) {
      ctx.ops().accumulate(grad, mine);
    } else {
      Tensor wide = ctx.activation(mine.shape());
      ctx.ops().cast(mine, wide);
      ctx.ops().accumulate(grad, wide);
    }
  }
  return dx;
}

Tensor SequenceParallelLayerNorm::backward(Context& ctx, const Tensor& dy) {
  return backward_summing_gradients(ctx, group_, {weight(), bias()}, name(),
                                    [&] { return LayerNorm::backward(ctx, dy); });
}

Tensor SequenceParallelRmsNorm::backward(Context& ctx, const Tensor& dy) {
  return backward_summing_gradients(ctx, group_, {weight()}, name(), [&] { return RmsNorm::backward(ctx, dy); });
}

SequenceParallelPositionalEmbedding::SequenceParallelPositionalEmbedding(std::string name, int64_t max_positions,
                                                                         int64_t dim, float init_std,
                                                                         Communicator& group)
    : Module(std::move(name)), group_(group), max_positions_(max_positions), dim_(dim) {
  weight_ = add_parameter("weight", {max_positions_, dim_}, ParamInit::normal(init_std));
}

Tensor SequenceParallelPositionalEmbedding::forward(Context& ctx, const Tensor& x) {
  const int64_t first = group_.rank() * x.dim(1);
  ZE_CHECK(x.ndim() == 3 && x.dim(2) == dim_ && first + x.dim(1) <= max_positions_) << x.debug_string();
  Tensor y = ctx.activation(x.shape());
  ctx.backend().copy_async(y.data(), x.data(), x.nbytes(), kComputeStream);
  ctx.ops().add_positional(y, weight_->data.slice(first * dim_, {max_positions_ - first, dim_}));
  return y;
}

Tensor SequenceParallelPositionalEmbedding::backward(Context& ctx, const Tensor& dy) {
  const int64_t first = group_.rank() * dy.dim(1);
  return backward_summing_gradients(ctx, group_, {weight_}, name(), [&] {
    ctx.ops().positional_backward(dy, weight_->grad.slice(first * dim_, {max_positions_ - first, dim_}));
    return dy;
  });
}

}  // namespace zero
