// The recorded ops; see functional.h. Each forward is the kernel the former
// hand-written layers called, and each rule the kernels of their backward, in
// their order, so the layers written with these compute bit for bit what
// those did.
#include "graph/functional.h"

#include "comm/communicator.h"
#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/layers.h"

namespace zero::fn {

namespace {

// Runs `grads` (a rule's kernels, which add into the parameters' gradients)
// with the defined gradients of `params` redirected into zeroed buffers, then
// sums those over `group` and adds them to the real gradients: a contribution
// computed from this rank's tokens only becomes the whole sequence's on every
// rank of the group. No group: `grads` alone.
Tensor summing_gradients(Context& ctx, Communicator* group, std::initializer_list<Parameter*> params,
                         const std::function<Tensor()>& grads) {
  if (group == nullptr) return grads();
  std::vector<std::pair<Parameter*, Tensor>> redirected;  // (parameter, its real gradient)
  for (Parameter* p : params) {
    if (p == nullptr || !p->grad.defined()) continue;
    Tensor mine = ctx.backend().zeros(p->grad.shape(), p->grad.dtype(), MemCategory::kGradients);
    redirected.emplace_back(p, std::exchange(p->grad, mine));
  }
  Tensor dx = grads();
  for (auto& [p, grad] : redirected) {
    Tensor mine = std::exchange(p->grad, grad);
    const absl::Status s = group->all_reduce(mine.data(), mine.numel(), mine.dtype(), ReduceOp::kSum);
    if (!s.ok()) {
      ctx.note(annotate(s, cat(ctx.module_name(), ": sequence-parallel all-reduce of a replicated gradient")));
    }
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

// p's gradient; for a frozen parameter (no gradient) a zeroed fp32 scratch
// of its shape, for a kernel that computes dx and the parameter's gradient
// in one pass (the norms'): its parameter part is thrown away.
Tensor grad_or_scratch(Context& ctx, const Parameter& p) {
  if (p.grad.defined()) return p.grad;
  ZE_CHECK(!p.requires_grad()) << p.name() << " trains but has no gradient buffer in backward";
  return ctx.backend().zeros(p.shape(), DType::kF32, MemCategory::kWorkspace);
}

}  // namespace

Tensor linear(Context& ctx, const Tensor& x, Parameter& weight, Parameter* bias) {
  Tensor y = affine_apply(ctx, x, weight, bias != nullptr ? bias->data : Tensor());
  ctx.record(
      "linear " + weight.name(), {x}, y,
      [x, &weight, bias](Context& c, const Tensor& dy) {
        return std::vector<Tensor>{affine_grads(c, dy, x, weight, bias)};
      },
      bias != nullptr ? std::vector<Parameter*>{&weight, bias} : std::vector<Parameter*>{&weight});
  return y;
}

Tensor add(Context& ctx, const Tensor& a, const Tensor& b) {
  ZE_CHECK(a.shape() == b.shape()) << "add of " << a.debug_string() << " and " << b.debug_string();
  Tensor y = ctx.activation(a.shape());
  ctx.ops().add(a, b, y);
  ctx.record("add", {a, b}, y, [](Context&, const Tensor& dy) { return std::vector<Tensor>{dy, dy}; });
  return y;
}

Tensor embedding(Context& ctx, const Tensor& ids, Parameter& weight) {
  ZE_CHECK(ids.dtype() == DType::kI32) << "embedding " << weight.name() << " of " << ids.debug_string();
  Shape shape = ids.shape();
  shape.push_back(weight.shape()[1]);
  Tensor y = ctx.activation(shape);
  ctx.ops().embedding_forward(ids, weight.data, y);
  ctx.record(
      "embedding " + weight.name(), {ids}, y,
      [ids, &weight](Context& c, const Tensor& dy) {
        if (weight.grad.defined()) c.ops().embedding_backward(ids, dy, weight.grad);
        return std::vector<Tensor>{Tensor()};
      },
      {&weight});
  return y;
}

Tensor embedding_slice(Context& ctx, const Tensor& ids, Parameter& weight, int64_t first) {
  ZE_CHECK(ids.dtype() == DType::kI32) << "embedding " << weight.name() << " of " << ids.debug_string();
  Shape shape = ids.shape();
  shape.push_back(weight.shape()[1]);
  Tensor y = ctx.activation(shape);
  ctx.ops().embedding_slice_forward(ids, first, weight.data, y);
  ctx.record(
      "embedding_slice " + weight.name(), {ids}, y,
      [ids, &weight, first](Context& c, const Tensor& dy) {
        if (weight.grad.defined()) c.ops().embedding_slice_backward(ids, first, dy, weight.grad);
        return std::vector<Tensor>{Tensor()};
      },
      {&weight});
  return y;
}

Tensor add_positional(Context& ctx, const Tensor& x, Parameter& table, int64_t first_row,
                      Communicator* sum_grads_over) {
  const int64_t rows = table.shape()[0], dim = table.shape()[1];
  ZE_CHECK(x.ndim() == 3 && x.dim(2) == dim && first_row >= 0 && first_row + x.dim(1) <= rows)
      << "positions " << first_row << "+ of " << table.name() << " for " << x.debug_string();
  Tensor y = ctx.activation(x.shape());
  // On the compute stream, where the ops run: no host wait (x stays alive
  // until the copy is done, by the allocator's stream-ordered reuse).
  ctx.backend().copy_async(y.data(), x.data(), x.nbytes(), kComputeStream);
  ctx.ops().add_positional(y, table.data.slice(first_row * dim, {rows - first_row, dim}));
  ctx.record(
      "add_positional " + table.name(), {x}, y,
      [&table, first_row, rows, dim, sum_grads_over](Context& c, const Tensor& dy) {
        return std::vector<Tensor>{summing_gradients(c, sum_grads_over, {&table}, [&] {
          if (table.grad.defined()) {
            c.ops().positional_backward(dy, table.grad.slice(first_row * dim, {rows - first_row, dim}));
          }
          return dy;
        })};
      },
      {&table});
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

Tensor layer_norm(Context& ctx, const Tensor& x, Parameter& weight, Parameter& bias, float eps,
                  Communicator* sum_grads_over) {
  const int64_t features = weight.shape()[0];
  const Tensor x2 = as_rows(x, features);
  Tensor y = ctx.activation(x.shape());
  Tensor mean = ctx.activation({x2.dim(0)}), var = ctx.activation({x2.dim(0)});
  ctx.ops().layernorm_forward(x2, weight.data, bias.data, eps, as_rows(y, features), mean, var);
  ctx.record("layer_norm " + weight.name(), {x}, y,
             [x, mean, var, &weight, &bias, eps, features, sum_grads_over](Context& c, const Tensor& dy) {
               return std::vector<Tensor>{summing_gradients(c, sum_grads_over, {&weight, &bias}, [&] {
                 Tensor dx = c.activation(x.shape());
                 c.ops().layernorm_backward(as_rows(dy, features), as_rows(x, features), weight.data, mean, var, eps,
                                            as_rows(dx, features), grad_or_scratch(c, weight),
                                            grad_or_scratch(c, bias));
                 return dx;
               })};
             },
             {&weight, &bias});
  return y;
}

Tensor rms_norm(Context& ctx, const Tensor& x, Parameter& weight, float eps, Communicator* sum_grads_over,
                bool unit_offset) {
  const int64_t features = weight.shape()[0];
  const Tensor x2 = as_rows(x, features);
  Tensor y = ctx.activation(x.shape());
  Tensor rstd = ctx.activation({x2.dim(0)});
  ctx.ops().rmsnorm_forward(x2, weight.data, eps, as_rows(y, features), rstd, unit_offset);
  ctx.record("rms_norm " + weight.name(), {x}, y,
             [x, rstd, &weight, features, sum_grads_over, unit_offset](Context& c, const Tensor& dy) {
               return std::vector<Tensor>{summing_gradients(c, sum_grads_over, {&weight}, [&] {
                 Tensor dx = c.activation(x.shape());
                 c.ops().rmsnorm_backward(as_rows(dy, features), as_rows(x, features), weight.data, rstd,
                                          as_rows(dx, features), grad_or_scratch(c, weight), unit_offset);
                 return dx;
               })};
             },
             {&weight});
  return y;
}

namespace {

// act(gate) * up with `act`'s kernels (SwiGLU's SiLU, GeGLU's tanh GELU).
// Saves gate and up.
Tensor gated(Context& ctx, const char* op, const Tensor& gate, const Tensor& up,
             void (Ops::*forward)(const Tensor&, const Tensor&, const Tensor&),
             void (Ops::*backward)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)) {
  ZE_CHECK(gate.shape() == up.shape()) << op << " of " << gate.debug_string() << " and " << up.debug_string();
  Tensor h = ctx.activation(gate.shape());
  (ctx.ops().*forward)(gate, up, h);
  ctx.record(op, {gate, up}, h, [gate, up, backward](Context& c, const Tensor& dh) {
    Tensor dgate = c.activation(gate.shape()), dup = c.activation(up.shape());
    (c.ops().*backward)(gate, up, dh, dgate, dup);
    return std::vector<Tensor>{dgate, dup};
  });
  return h;
}

}  // namespace

Tensor swiglu(Context& ctx, const Tensor& gate, const Tensor& up) {
  return gated(ctx, "swiglu", gate, up, &Ops::swiglu_forward, &Ops::swiglu_backward);
}

Tensor geglu(Context& ctx, const Tensor& gate, const Tensor& up) {
  return gated(ctx, "geglu", gate, up, &Ops::geglu_forward, &Ops::geglu_backward);
}

Tensor scale(Context& ctx, const Tensor& x, float s) {
  Tensor y = ctx.activation(x.shape(), x.dtype());
  ctx.backend().copy_async(y.data(), x.data(), x.nbytes(), kComputeStream);
  ctx.ops().scale(y, s);
  ctx.record("scale", {x}, y, [s](Context& c, const Tensor& dy) {
    Tensor dx = c.grad_writable(dy) ? dy : c.activation(dy.shape(), dy.dtype());
    if (dx.data() != dy.data()) c.backend().copy_async(dx.data(), dy.data(), dy.nbytes(), kComputeStream);
    c.ops().scale(dx, s);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor softcap(Context& ctx, const Tensor& x, float cap) {
  Tensor y = ctx.activation(x.shape());
  ctx.ops().softcap_forward(x, cap, y);
  // Keeps x, not y: y is a model's logits, which the engine overwrites with
  // their gradient (the loss's in-place backward) before this rule runs.
  ctx.record("softcap", {x}, y, [x, cap](Context& c, const Tensor& dy) {
    Tensor y = c.activation(x.shape());
    c.ops().softcap_forward(x, cap, y);
    const Tensor dx = c.grad_writable(dy) ? dy : c.activation(dy.shape());
    c.ops().softcap_backward(y, dy, cap, dx);
    return std::vector<Tensor>{dx};
  });
  return y;
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

Tensor dropout(Context& ctx, const Tensor& x, float p, int64_t site, int64_t first_position, int64_t first_feature) {
  ZE_CHECK(p >= 0.0f && p < 1.0f) << "dropout " << p;
  if (!ctx.grad_enabled()) return x;
  const DropoutKey key{ctx.dropout_seed(), site, ctx.first_sample(), first_position, first_feature};
  Tensor y = ctx.activation(x.shape(), x.dtype());
  ctx.ops().dropout(x, y, p, key);
  ctx.record("dropout", {x}, y, [p, key](Context& c, const Tensor& dy) {
    Tensor dx = c.activation(dy.shape(), dy.dtype());
    c.ops().dropout_backward(dy, dx, p, key);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor matmul(Context& ctx, const Tensor& a, const Tensor& b, MatmulSpec spec) {
  ZE_CHECK(!spec.accumulate && a.ndim() == b.ndim() && (a.ndim() == 2 || a.ndim() == 3))
      << "fn::matmul of " << a.debug_string() << " and " << b.debug_string();
  const int64_t m = spec.trans_a ? a.dim(-1) : a.dim(-2), n = spec.trans_b ? b.dim(-2) : b.dim(-1);
  Tensor c = ctx.activation(a.ndim() == 3 ? Shape{a.dim(0), m, n} : Shape{m, n});
  ctx.ops().matmul(a, b, c, spec);
  ctx.record("matmul", {a, b}, c, [a, b, spec](Context& cx, const Tensor& dc) {
    // C = alpha op(A) op(B): dA = alpha dC op(B)^T (stored transposed when
    // A is), dB = alpha op(A)^T dC (likewise).
    MatmulSpec sa = spec, sb = spec;
    Tensor da = cx.activation(a.shape()), db = cx.activation(b.shape());
    if (!spec.trans_a) {
      sa.trans_a = false, sa.trans_b = !spec.trans_b;
      cx.ops().matmul(dc, b, da, sa);
    } else {
      sa.trans_a = spec.trans_b, sa.trans_b = true;
      cx.ops().matmul(b, dc, da, sa);
    }
    if (!spec.trans_b) {
      sb.trans_a = !spec.trans_a, sb.trans_b = false;
      cx.ops().matmul(a, dc, db, sb);
    } else {
      sb.trans_a = true, sb.trans_b = spec.trans_a;
      cx.ops().matmul(dc, a, db, sb);
    }
    return std::vector<Tensor>{da, db};
  });
  return c;
}

Tensor causal_softmax_(Context& ctx, Tensor&& scores, const Shape& shape) {
  Tensor mine = std::move(scores);
  Tensor probs = mine.storage() != nullptr && mine.storage().use_count() == 1 ? mine.view(shape)
                                                                               : ctx.activation(shape);
  ctx.ops().causal_softmax_forward(mine.view(shape), probs);
  ctx.record("causal_softmax", {mine}, probs, [probs](Context& c, const Tensor& dp) {
    const Tensor ds = c.grad_writable(dp) ? dp : c.activation(dp.shape());
    c.ops().causal_softmax_backward(probs, dp, ds);
    return std::vector<Tensor>{ds};
  });
  return probs;
}

Tensor transpose12(Context& ctx, const Tensor& x) {
  ZE_CHECK(x.ndim() == 4) << "transpose12 of " << x.debug_string();
  Tensor y = ctx.activation({x.dim(0), x.dim(2), x.dim(1), x.dim(3)});
  ctx.ops().transpose12(x, y);
  ctx.record("transpose12", {x}, y, [shape = x.shape()](Context& c, const Tensor& dy) {
    Tensor dx = c.activation(shape);
    c.ops().transpose12(dy, dx);
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor rope_(Context& ctx, Tensor&& x, const RopeFreqs& freqs) {
  Tensor mine = std::move(x);
  Tensor y = mine.storage() != nullptr && mine.storage().use_count() == 1 ? mine : ctx.activation(mine.shape());
  ctx.ops().rope(mine, y, freqs, 0, false);
  ctx.record("rope", {mine}, y, [freqs](Context& c, const Tensor& dy) {
    const Tensor dx = c.grad_writable(dy) ? dy : c.activation(dy.shape());
    c.ops().rope(dy, dx, freqs, 0, true);  // R^T
    return std::vector<Tensor>{dx};
  });
  return y;
}

std::array<Tensor, 3> split_qkv(Context& ctx, const Tensor& qkv, int64_t heads, int64_t head_dim, int64_t kv_heads) {
  if (kv_heads == 0) kv_heads = heads;
  const Shape q_shape{qkv.dim(0), heads, qkv.dim(1), head_dim}, kv_shape{qkv.dim(0), kv_heads, qkv.dim(1), head_dim};
  std::array<Tensor, 3> out{ctx.activation(q_shape), ctx.activation(kv_shape), ctx.activation(kv_shape)};
  ctx.ops().split_qkv(qkv, out[0], out[1], out[2]);
  // v's and k's gradients wait here for q's, which backward reaches last.
  struct Pending {
    Tensor dk, dv;
  };
  auto pending = std::make_shared<Pending>();
  ctx.record("split_qkv (q)", {qkv}, out[0], [pending, kv_shape, qkv_shape = qkv.shape()](Context& c, const Tensor& dq) {
    auto take = [&](Tensor& d) {
      Tensor g = d.defined() ? std::move(d) : c.backend().zeros(kv_shape, DType::kF32, MemCategory::kActivations);
      d = Tensor();
      return g;
    };
    Tensor dk = take(pending->dk), dv = take(pending->dv);
    Tensor dqkv = c.activation(qkv_shape);
    c.ops().merge_qkv(dq, dk, dv, dqkv);
    return std::vector<Tensor>{dqkv};
  });
  ctx.record("split_qkv (k)", {}, out[1], [pending](Context&, const Tensor& dk) {
    pending->dk = dk;
    return std::vector<Tensor>{};
  });
  ctx.record("split_qkv (v)", {}, out[2], [pending](Context&, const Tensor& dv) {
    pending->dv = dv;
    return std::vector<Tensor>{};
  });
  return out;
}

}  // namespace zero::fn
