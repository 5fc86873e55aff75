// Megatron's tensor-parallel Linear layers; see parallel_layers.h.
#include "graph/parallel_layers.h"

#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/layers.h"

namespace zero {

namespace {

// This rank's share of `n` features over the group (n must divide).
int64_t share(const std::string& name, int64_t n, const Communicator& group, const char* what) {
  ZE_CHECK(n % group.world_size() == 0)
      << name << ": " << what << " " << n << " do not divide over a tensor group of " << group.world_size();
  return n / group.world_size();
}

// Sums t over the group in place; a failure is the pass's error.
void sum_over(Context& ctx, Communicator& group, const Tensor& t, const std::string& name) {
  if (group.world_size() == 1) return;
  absl::Status s = group.all_reduce(t.data(), t.numel(), t.dtype(), ReduceOp::kSum);
  if (!s.ok()) ctx.note(annotate(s, cat(name, ": tensor-parallel all-reduce")));
}

}  // namespace

// ---- ColumnParallelLinear
ColumnParallelLinear::ColumnParallelLinear(std::string name, int64_t in_features, int64_t out_features, bool bias,
                                           float init_std, Communicator& group)
    : Module(std::move(name)), group_(group), in_(in_features) {
  local_out_ = share(this->name(), out_features, group, "output features");
  const int64_t offset = group.rank() * local_out_;
  weight_ = add_parameter("weight", {local_out_, in_}, ParamInit::normal(init_std));
  weight_->set_slice({{out_features, in_}, 0, offset});
  if (bias) {
    bias_ = add_parameter("bias", {local_out_}, ParamInit::zeros());
    bias_->set_slice({{out_features}, 0, offset});
  }
}

Tensor ColumnParallelLinear::forward(Context& ctx, const Tensor& x) {
  Tensor y = ctx.activation(with_last_dim(x.shape(), local_out_));
  MatmulSpec spec;
  spec.trans_b = true;
  spec.compute = ctx.param_dtype();
  ctx.ops().matmul(as_rows(x, in_), weight_->data, as_rows(y, local_out_), spec, bias_ ? bias_->data : Tensor());
  ctx.save(x);
  return y;
}

Tensor ColumnParallelLinear::backward(Context& ctx, const Tensor& dy) {
  const Tensor& x = ctx.saved(0);
  const Tensor dy2 = as_rows(dy, local_out_);
  Tensor dx = ctx.activation(x.shape());
  MatmulSpec spec;
  spec.compute = ctx.param_dtype();
  ctx.ops().matmul(dy2, weight_->data, as_rows(dx, in_), spec);  // this rank's part of dx = dy W
  if (weight_->grad.defined()) {
    MatmulSpec wspec = spec;
    wspec.trans_a = true;
    wspec.accumulate = true;
    ctx.ops().matmul(dy2, as_rows(x, in_), weight_->grad, wspec);
  }
  if (bias_ != nullptr && bias_->grad.defined()) ctx.ops().bias_backward(dy2, bias_->grad);
  sum_over(ctx, group_, dx, name());
  return dx;
}

// ---- RowParallelLinear
RowParallelLinear::RowParallelLinear(std::string name, int64_t in_features, int64_t out_features, bool bias,
                                     float init_std, Communicator& group)
    : Module(std::move(name)), group_(group), out_(out_features) {
  local_in_ = share(this->name(), in_features, group, "input features");
  weight_ = add_parameter("weight", {out_, local_in_}, ParamInit::normal(init_std));
  weight_->set_slice({{out_, in_features}, 1, group.rank() * local_in_});
  if (bias) bias_ = add_parameter("bias", {out_}, ParamInit::zeros());
}

Tensor RowParallelLinear::forward(Context& ctx, const Tensor& x) {
  Tensor y = ctx.activation(with_last_dim(x.shape(), out_));
  MatmulSpec spec;
  spec.trans_b = true;
  spec.compute = ctx.param_dtype();
  // The bias joins on the group's first rank only, so the sum holds it once.
  const Tensor bias = bias_ != nullptr && group_.rank() == 0 ? bias_->data : Tensor();
  ctx.ops().matmul(as_rows(x, local_in_), weight_->data, as_rows(y, out_), spec, bias);
  sum_over(ctx, group_, y, name());
  ctx.save(x);
  return y;
}

Tensor RowParallelLinear::backward(Context& ctx, const Tensor& dy) {
  const Tensor& x = ctx.saved(0);
  const Tensor dy2 = as_rows(dy, out_);
  Tensor dx = ctx.activation(x.shape());
  MatmulSpec spec;
  spec.compute = ctx.param_dtype();
  ctx.ops().matmul(dy2, weight_->data, as_rows(dx, local_in_), spec);  // dx_r = dy W_r
  if (weight_->grad.defined()) {
    MatmulSpec wspec = spec;
    wspec.trans_a = true;
    wspec.accumulate = true;
    ctx.ops().matmul(dy2, as_rows(x, local_in_), weight_->grad, wspec);
  }
  // dy is the same on every rank of the group, so is the bias gradient.
  if (bias_ != nullptr && bias_->grad.defined()) ctx.ops().bias_backward(dy2, bias_->grad);
  return dx;
}

}  // namespace zero
