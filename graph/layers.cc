// Built-in layers; see layers.h.
#include "graph/layers.h"

#include "comm/communicator.h"
#include "graph/functional.h"

namespace zero {

Tensor as_rows(const Tensor& t, int64_t cols) {
  ZE_CHECK(cols > 0 && t.numel() % cols == 0 && t.dim(-1) == cols) << t.debug_string();
  return t.view({t.numel() / cols, cols});
}

Shape with_last_dim(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

// ---- Linear
Linear::Linear(std::string name, int64_t in_features, int64_t out_features, bool bias,
               float init_std)
    : Module(std::move(name)) {
  weight_ = add_parameter("weight", {out_features, in_features}, ParamInit::normal(init_std));
  if (bias) bias_ = add_parameter("bias", {out_features}, ParamInit::zeros());
}

Tensor affine_apply(Context& ctx, const Tensor& x, const Parameter& weight, const Tensor& bias) {
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  Tensor y = ctx.activation(with_last_dim(x.shape(), out));
  MatmulSpec spec;
  spec.trans_b = true;
  spec.compute = ctx.param_dtype();
  ctx.ops().matmul(as_rows(x, in), weight.data, as_rows(y, out), spec, bias);
  return y;
}

Tensor affine_grads(Context& ctx, const Tensor& dy, const Tensor& x, Parameter& weight, Parameter* bias,
                    const std::function<void(const Tensor& dx)>& dx_ready) {
  const int64_t out = weight.shape()[0], in = weight.shape()[1];
  const Tensor dy2 = as_rows(dy, out);
  Tensor dx = ctx.activation(x.shape());
  MatmulSpec spec;
  spec.compute = ctx.param_dtype();
  ctx.ops().matmul(dy2, weight.data, as_rows(dx, in), spec);  // dx = dy W
  if (dx_ready) dx_ready(dx);
  if (weight.grad.defined()) {                                // dW += dy^T x
    MatmulSpec wspec = spec;
    wspec.trans_a = true;
    wspec.accumulate = true;
    ctx.ops().matmul(dy2, as_rows(x, in), weight.grad, wspec);
  }
  if (bias != nullptr && bias->grad.defined()) ctx.ops().bias_backward(dy2, bias->grad);
  return dx;
}

Tensor Linear::forward(Context& ctx, const Tensor& x) { return fn::linear(ctx, x, *weight_, bias_); }

// ---- Dropout
Dropout::Dropout(std::string name, float p, int64_t layer_id, const Communicator* sequence_group)
    : Module(std::move(name)), p_(p), layer_id_(layer_id), sequence_group_(sequence_group) {
  ZE_CHECK(p >= 0.0f && p < 1.0f) << this->name() << ": dropout " << p;
}

Tensor Dropout::forward(Context& ctx, const Tensor& x) {
  // A sequence-parallel shard holds positions [r S/T, (r + 1) S/T) of each sample.
  const int64_t first_position = sequence_group_ != nullptr ? sequence_group_->rank() * x.dim(1) : 0;
  return fn::dropout(ctx, x, p_, layer_id_, first_position);
}

// ---- LayerNorm
LayerNorm::LayerNorm(std::string name, int64_t features, float eps)
    : Module(std::move(name)), features_(features), eps_(eps) {
  weight_ = add_parameter("weight", {features}, ParamInit::ones());
  bias_ = add_parameter("bias", {features}, ParamInit::zeros());
}

Tensor LayerNorm::forward(Context& ctx, const Tensor& x) { return fn::layer_norm(ctx, x, *weight_, *bias_, eps_); }

// ---- RmsNorm
RmsNorm::RmsNorm(std::string name, int64_t features, float eps)
    : Module(std::move(name)), features_(features), eps_(eps) {
  weight_ = add_parameter("weight", {features}, ParamInit::ones());
}

Tensor RmsNorm::forward(Context& ctx, const Tensor& x) { return fn::rms_norm(ctx, x, *weight_, eps_); }

// ---- Gelu
Tensor Gelu::forward(Context& ctx, const Tensor& x) { return fn::gelu(ctx, x); }

// ---- Embedding
Embedding::Embedding(std::string name, int64_t num_embeddings, int64_t dim, float init_std)
    : Module(std::move(name)), num_(num_embeddings), dim_(dim) {
  weight_ = add_parameter("weight", {num_, dim_}, ParamInit::normal(init_std));
}

Tensor Embedding::forward(Context& ctx, const Tensor& ids) { return fn::embedding(ctx, ids, *weight_); }

// ---- PositionalEmbedding
PositionalEmbedding::PositionalEmbedding(std::string name, int64_t max_positions, int64_t dim,
                                         float init_std)
    : Module(std::move(name)) {
  weight_ = add_parameter("weight", {max_positions, dim}, ParamInit::normal(init_std));
}

Tensor PositionalEmbedding::forward(Context& ctx, const Tensor& x) { return fn::add_positional(ctx, x, *weight_); }

// ---- TiedLMHead
TiedLMHead::TiedLMHead(std::string name, Parameter* table) : Module(std::move(name)), table_(table) {
  use_parameter(table);
}

// logits = x E^T: a linear map with the table as its weight, no bias.
Tensor TiedLMHead::forward(Context& ctx, const Tensor& x) { return fn::linear(ctx, x, *table_); }

// ---- Sequential
Tensor Sequential::forward(Context& ctx, const Tensor& x) {
  Tensor h = x;
  for (Module* m : children()) h = ctx.forward(*m, h);
  return h;
}

}  // namespace zero
