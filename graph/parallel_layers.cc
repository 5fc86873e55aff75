// Megatron's tensor-parallel Linear layers; see parallel_layers.h.
#include "graph/parallel_layers.h"

#include <algorithm>

#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/layers.h"
#include "graph/sequence_parallel.h"

namespace zero {

namespace {

// This rank's share of `n` features over the group (n must divide).
int64_t share(const std::string& name, int64_t n, const Communicator& group, const char* what) {
  ZE_CHECK(n % group.world_size() == 0)
      << name << ": " << what << " " << n << " do not divide over a tensor group of " << group.world_size();
  return n / group.world_size();
}

}  // namespace

void sum_over(Context& ctx, Communicator& group, const Tensor& t, const std::string& name) {
  if (group.world_size() == 1) return;
  absl::Status s = group.all_reduce(t.data(), t.numel(), t.dtype(), ReduceOp::kSum);
  if (!s.ok()) ctx.note(annotate(s, cat(name, ": tensor-parallel all-reduce")));
}

SplitRange even_split(int64_t n, int parts, int index) {
  ZE_CHECK(parts > 0 && index >= 0 && index < parts && n >= 0) << n << " / " << parts << " part " << index;
  const int64_t base = n / parts, extra = n % parts;
  return {index * base + std::min<int64_t>(index, extra), base + (index < extra ? 1 : 0)};
}

// ---- ColumnParallelLinear
ColumnParallelLinear::ColumnParallelLinear(std::string name, int64_t in_features, int64_t out_features, bool bias,
                                           float init_std, Communicator& group, int64_t blocks,
                                           bool sequence_parallel)
    : Module(std::move(name)), group_(group), sequence_parallel_(sequence_parallel) {
  ZE_CHECK(blocks >= 1 && out_features % blocks == 0) << this->name() << ": " << out_features << " in " << blocks;
  const int64_t part = share(this->name(), out_features / blocks, group, "output features");
  const int64_t offset = group.rank() * part, local_out = part * blocks;
  weight_ = add_parameter("weight", {local_out, in_features}, ParamInit::normal(init_std));
  weight_->set_slice({{out_features, in_features}, 0, offset, blocks});
  if (bias) {
    bias_ = add_parameter("bias", {local_out}, ParamInit::zeros());
    bias_->set_slice({{out_features}, 0, offset, blocks});
  }
}

Tensor ColumnParallelLinear::forward(Context& ctx, const Tensor& x) {
  const Tensor bias = bias_ ? bias_->data : Tensor();
  if (!sequence_parallel_) return affine_forward(ctx, x, *weight_, bias);
  Tensor y = affine_apply(ctx, gather_sequence(ctx, group_, x, name()), *weight_, bias);
  ctx.save(x);  // the shard; backward gathers it again
  return y;
}

Tensor ColumnParallelLinear::backward(Context& ctx, const Tensor& dy) {
  if (sequence_parallel_) {
    const Tensor x = gather_sequence(ctx, group_, ctx.saved(0), name());
    return scatter_sequence(ctx, group_, affine_grads(ctx, dy, x, *weight_, bias_), name());
  }
  Tensor dx = affine_backward(ctx, dy, *weight_, bias_);  // this rank's part of dx = dy W
  sum_over(ctx, group_, dx, name());
  return dx;
}

// ---- RowParallelLinear
RowParallelLinear::RowParallelLinear(std::string name, int64_t in_features, int64_t out_features, bool bias,
                                     float init_std, Communicator& group, bool sequence_parallel)
    : Module(std::move(name)), group_(group), sequence_parallel_(sequence_parallel) {
  const int64_t local_in = share(this->name(), in_features, group, "input features");
  weight_ = add_parameter("weight", {out_features, local_in}, ParamInit::normal(init_std));
  weight_->set_slice({{out_features, in_features}, 1, group.rank() * local_in});
  if (bias) bias_ = add_parameter("bias", {out_features}, ParamInit::zeros());
}

Tensor RowParallelLinear::forward(Context& ctx, const Tensor& x) {
  // The bias joins on the group's first rank only, so the sum holds it once.
  Tensor y = affine_forward(ctx, x, *weight_, bias_ != nullptr && group_.rank() == 0 ? bias_->data : Tensor());
  if (sequence_parallel_) return scatter_sequence(ctx, group_, y, name());
  sum_over(ctx, group_, y, name());
  return y;
}

// dx_r = dy W_r; dy is the same on every rank of the group (with sequence
// parallelism once gathered), so is the bias gradient.
Tensor RowParallelLinear::backward(Context& ctx, const Tensor& dy) {
  if (sequence_parallel_) return affine_backward(ctx, gather_sequence(ctx, group_, dy, name()), *weight_, bias_);
  return affine_backward(ctx, dy, *weight_, bias_);
}

}  // namespace zero
