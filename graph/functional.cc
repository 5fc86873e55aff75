// The recorded ops; see functional.h. Each forward is the kernel the
// hand-written layers call, and each rule the kernels of their backward, so a
// module written with these computes bit for bit what the layer computes.
#include "graph/functional.h"

#include "core/check.h"
#include "graph/layers.h"

namespace zero::fn {

Tensor linear(Context& ctx, const Tensor& x, Parameter& weight, Parameter* bias) {
  Tensor y = affine_apply(ctx, x, weight, bias != nullptr ? bias->data : Tensor());
  ctx.record("linear " + weight.name(), {x}, y, [x, &weight, bias](Context& c, const Tensor& dy) {
    return std::vector<Tensor>{affine_grads(c, dy, x, weight, bias)};
  });
  return y;
}

Tensor add(Context& ctx, const Tensor& a, const Tensor& b) {
  ZE_CHECK(a.shape() == b.shape()) << "add of " << a.debug_string() << " and " << b.debug_string();
  Tensor y = ctx.activation(a.shape());
  ctx.ops().add(a, b, y);
  ctx.record("add", {a, b}, y, [](Context&, const Tensor& dy) { return std::vector<Tensor>{dy, dy}; });
  return y;
}

Tensor gelu(Context& ctx, const Tensor& x) {
  Tensor y = ctx.activation(x.shape());
  ctx.ops().gelu_forward(x, y);
  ctx.record("gelu", {x}, y, [x](Context& c, const Tensor& dy) {
    Tensor dx = c.activation(x.shape());
    c.ops().gelu_backward(x, dy, dx);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor layer_norm(Context& ctx, const Tensor& x, Parameter& weight, Parameter& bias, float eps) {
  const int64_t features = weight.shape()[0];
  const Tensor x2 = as_rows(x, features);
  Tensor y = ctx.activation(x.shape());
  Tensor mean = ctx.activation({x2.dim(0)}), var = ctx.activation({x2.dim(0)});
  ctx.ops().layernorm_forward(x2, weight.data, bias.data, eps, as_rows(y, features), mean, var);
  ctx.record("layer_norm " + weight.name(), {x}, y,
             [x, mean, var, &weight, &bias, eps, features](Context& c, const Tensor& dy) {
               ZE_CHECK(weight.grad.defined() && bias.grad.defined()) << "frozen layer norm " << weight.name();
               Tensor dx = c.activation(x.shape());
               c.ops().layernorm_backward(as_rows(dy, features), as_rows(x, features), weight.data, mean, var, eps,
                                          as_rows(dx, features), weight.grad, bias.grad);
               return std::vector<Tensor>{dx};
             });
  return y;
}

Tensor rms_norm(Context& ctx, const Tensor& x, Parameter& weight, float eps) {
  const int64_t features = weight.shape()[0];
  const Tensor x2 = as_rows(x, features);
  Tensor y = ctx.activation(x.shape());
  Tensor rstd = ctx.activation({x2.dim(0)});
  ctx.ops().rmsnorm_forward(x2, weight.data, eps, as_rows(y, features), rstd);
  ctx.record("rms_norm " + weight.name(), {x}, y, [x, rstd, &weight, features](Context& c, const Tensor& dy) {
    ZE_CHECK(weight.grad.defined()) << "frozen RMSNorm " << weight.name();
    Tensor dx = c.activation(x.shape());
    c.ops().rmsnorm_backward(as_rows(dy, features), as_rows(x, features), weight.data, rstd, as_rows(dx, features),
                             weight.grad);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor swiglu(Context& ctx, const Tensor& gate, const Tensor& up) {
  ZE_CHECK(gate.shape() == up.shape()) << "swiglu of " << gate.debug_string() << " and " << up.debug_string();
  Tensor h = ctx.activation(gate.shape());
  ctx.ops().swiglu_forward(gate, up, h);
  ctx.record("swiglu", {gate, up}, h, [gate, up](Context& c, const Tensor& dh) {
    Tensor dgate = c.activation(gate.shape()), dup = c.activation(up.shape());
    c.ops().swiglu_backward(gate, up, dh, dgate, dup);
    return std::vector<Tensor>{dgate, dup};
  });
  return h;
}

Tensor add_(Context& ctx, Tensor&& a, const Tensor& b) {
  ZE_CHECK(a.shape() == b.shape()) << "add_ of " << a.debug_string() << " and " << b.debug_string();
  Tensor mine = std::move(a);
  // One owner left (this function): nobody saved it, its buffer is free to take.
  if (mine.storage() == nullptr || mine.storage().use_count() != 1) return add(ctx, mine, b);
  ctx.ops().add(mine, b, mine);
  ctx.record("add_", {mine, b}, mine, [](Context&, const Tensor& dy) { return std::vector<Tensor>{dy, dy}; });
  return mine;
}

Tensor dropout(Context& ctx, const Tensor& x, float p, int64_t site, int64_t first_position) {
  ZE_CHECK(p >= 0.0f && p < 1.0f) << "dropout " << p;
  if (!ctx.grad_enabled()) return x;
  const DropoutKey key{ctx.dropout_seed(), site, ctx.first_sample(), first_position};
  Tensor y = ctx.activation(x.shape(), x.dtype());
  ctx.ops().dropout(x, y, p, key);
  ctx.record("dropout", {x}, y, [p, key](Context& c, const Tensor& dy) {
    Tensor dx = c.activation(dy.shape(), dy.dtype());
    c.ops().dropout_backward(dy, dx, p, key);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace zero::fn
