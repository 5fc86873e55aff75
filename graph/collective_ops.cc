// Tensor-parallel collectives as recorded ops; see collective_ops.h. The
// kernels (the collective plus its layout moves) are written once here and
// run by both directions' rules, in the order the former hand-written layers
// ran them, so the layers built on these compute bit for bit what those did.
#include "graph/collective_ops.h"

#include "core/check.h"
#include "core/status.h"
#include "core/strings.h"
#include "graph/functional.h"
#include "graph/layers.h"

namespace zero::fn {

namespace {

void note_failure(Context& ctx, const absl::Status& s, const char* what) {
  if (!s.ok()) ctx.note(annotate(s, cat(ctx.module_name(), ": ", what)));
}

// t summed over the group, in place.
void sum_in_place(Context& ctx, Communicator& group, const Tensor& t) {
  note_failure(ctx, group.all_reduce(t.data(), t.numel(), t.dtype(), ReduceOp::kSum), "tensor-parallel all-reduce");
}

// Along the sequence the shards are not contiguous in [B, S, C] (each sample
// holds one piece of each rank's), so the collectives run on a rank-major
// buffer [T, B, S/T * C] and transpose12 moves between the two orders.
Tensor all_gather_sequence(Context& ctx, Communicator& group, const Tensor& shard) {
  const int t = group.world_size();
  const int64_t b = shard.dim(0), piece = shard.dim(1) * shard.dim(2), block = b * piece;
  Tensor ranks = ctx.activation({1, t, b, piece});
  ctx.backend().copy(ranks.slice(group.rank() * block, {block}), shard.view({block}));
  note_failure(ctx, group.all_gather(ranks.data(), block, block, ranks.dtype()), "sequence-parallel all-gather");
  Tensor full = ctx.activation({b, shard.dim(1) * t, shard.dim(2)});
  ctx.ops().transpose12(ranks, full.view({1, b, t, piece}));
  return full;
}

Tensor reduce_scatter_sequence(Context& ctx, Communicator& group, const Tensor& full) {
  const int t = group.world_size();
  ZE_CHECK(full.ndim() == 3 && full.dim(1) % t == 0)
      << ctx.module_name() << ": a sequence of " << full.dim(1) << " does not split over a tensor group of " << t;
  const int64_t b = full.dim(0), s = full.dim(1) / t, piece = s * full.dim(2), block = b * piece;
  Tensor ranks = ctx.activation({1, t, b, piece});
  ctx.ops().transpose12(full.view({1, b, t, piece}), ranks);
  Tensor shard = ctx.activation({b, s, full.dim(2)});
  note_failure(ctx, group.reduce_scatter(ranks.data(), shard.data(), std::vector<int64_t>(t, block), ranks.dtype()),
               "sequence-parallel reduce-scatter");
  return shard;
}

// The all-to-all-v of row blocks (counts and displacements in elements).
Tensor all_to_all_rows(Context& ctx, Communicator& group, const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows) {
  const int64_t c = x.dim(-1);
  auto elements = [c](const std::vector<int64_t>& rows, std::vector<int64_t>& displs) {
    std::vector<int64_t> counts(rows.size());
    displs.assign(rows.size(), 0);
    int64_t at = 0;
    for (size_t q = 0; q < rows.size(); ++q) displs[q] = at, counts[q] = rows[q] * c, at += counts[q];
    return counts;
  };
  std::vector<int64_t> send_displs, recv_displs;
  std::vector<int64_t> send_counts = elements(send_rows, send_displs), recv_counts = elements(recv_rows, recv_displs);
  int64_t received = 0;
  for (int64_t r : recv_rows) received += r;
  ZE_CHECK(x.numel() == (send_displs.empty() ? 0 : send_displs.back() + send_counts.back()))
      << ctx.module_name() << ": " << x.numel() << " elements to send as " << send_rows.size() << " blocks";
  Tensor y = ctx.activation({received, c}, x.dtype());
  note_failure(ctx,
               group.all_to_all_v(x.data(), std::move(send_counts), std::move(send_displs), y.data(),
                                  std::move(recv_counts), std::move(recv_displs), x.dtype()),
               "expert-parallel all-to-all");
  return y;
}

std::vector<Parameter*> linear_parameters(Parameter& weight, Parameter* bias) {
  return bias != nullptr ? std::vector<Parameter*>{&weight, bias} : std::vector<Parameter*>{&weight};
}

}  // namespace

Tensor copy_to_group(Context& ctx, const Tensor& x, Communicator& group) {
  if (group.world_size() == 1) return x;
  ctx.record("copy_to_group", {x}, x, [&group](Context& c, const Tensor& dy) {
    Tensor dx = dy;
    if (!c.grad_writable(dy)) {
      dx = c.activation(dy.shape(), dy.dtype());
      c.backend().copy(dx, dy);
    }
    sum_in_place(c, group, dx);
    return std::vector<Tensor>{dx};
  });
  return x;
}

Tensor reduce_from_group(Context& ctx, Tensor&& x, Communicator& group) {
  Tensor mine = std::move(x);
  if (group.world_size() == 1) return mine;
  // One owner left (this function): nobody saved it, its buffer is free to
  // take (asked before any copy of the handle is made).
  const bool take = mine.storage() != nullptr && mine.storage().use_count() == 1;
  Tensor y = take ? mine : ctx.activation(mine.shape(), mine.dtype());
  if (!take) ctx.backend().copy(y, mine);
  sum_in_place(ctx, group, y);
  ctx.record("reduce_from_group", {mine}, y, [](Context&, const Tensor& dy) { return std::vector<Tensor>{dy}; });
  return y;
}

Tensor gather_sequence(Context& ctx, const Tensor& shard, Communicator& group) {
  if (group.world_size() == 1) return shard;
  Tensor full = all_gather_sequence(ctx, group, shard);
  ctx.record("gather_sequence", {shard}, full, [&group](Context& c, const Tensor& dy) {
    return std::vector<Tensor>{reduce_scatter_sequence(c, group, dy)};
  });
  return full;
}

Tensor scatter_sequence(Context& ctx, const Tensor& full, Communicator& group) {
  if (group.world_size() == 1) return full;
  Tensor shard = reduce_scatter_sequence(ctx, group, full);
  ctx.record("scatter_sequence", {full}, shard, [&group](Context& c, const Tensor& dy) {
    return std::vector<Tensor>{all_gather_sequence(c, group, dy)};
  });
  return shard;
}

Tensor exchange_rows(Context& ctx, const Tensor& x, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, Communicator& group) {
  Tensor y = all_to_all_rows(ctx, group, x, send_rows, recv_rows);
  ctx.record("exchange_rows", {x}, y, [&group, send_rows, recv_rows](Context& c, const Tensor& dy) {
    return std::vector<Tensor>{all_to_all_rows(c, group, dy, recv_rows, send_rows)};
  });
  return y;
}

Tensor linear_partial(Context& ctx, const Tensor& x, Communicator& group, Parameter& weight, Parameter* bias) {
  const bool add_bias = bias != nullptr && group.rank() == 0;
  Tensor y = affine_apply(ctx, x, weight, add_bias ? bias->data : Tensor());
  ctx.record(
      "linear_partial " + weight.name(), {x}, y,
      [x, &weight, bias](Context& c, const Tensor& dy) {
        return std::vector<Tensor>{affine_grads(c, dy, x, weight, bias)};
      },
      linear_parameters(weight, bias));
  return y;
}

Tensor linear_gathered(Context& ctx, const Tensor& shard, Communicator& group, Parameter& weight, Parameter* bias) {
  if (group.world_size() == 1) return linear(ctx, shard, weight, bias);
  Tensor y = affine_apply(ctx, all_gather_sequence(ctx, group, shard), weight,
                          bias != nullptr ? bias->data : Tensor());
  ctx.record(
      "linear_gathered " + weight.name(), {shard}, y,
      [shard, &group, &weight, bias](Context& c, const Tensor& dy) {
        const Tensor x = all_gather_sequence(c, group, shard);
        return std::vector<Tensor>{reduce_scatter_sequence(c, group, affine_grads(c, dy, x, weight, bias))};
      },
      linear_parameters(weight, bias));
  return y;
}

Tensor linear_copy_to_group(Context& ctx, const Tensor& x, Communicator& group, Parameter& weight, Parameter* bias) {
  if (group.world_size() == 1) return linear(ctx, x, weight, bias);
  Tensor y = affine_apply(ctx, x, weight, bias != nullptr ? bias->data : Tensor());
  ctx.record(
      "linear_copy_to_group " + weight.name(), {x}, y,
      [x, &group, &weight, bias](Context& c, const Tensor& dy) {
        // The all-reduce of dx runs while the weight and bias gradients are computed.
        CommHandle sum;
        Tensor dx = affine_grads(c, dy, x, weight, bias, [&](const Tensor& ready) {
          sum = group.all_reduce_async(ready.data(), ready.numel(), ready.dtype(), ReduceOp::kSum);
        });
        note_failure(c, sum->wait(), "tensor-parallel all-reduce");
        return std::vector<Tensor>{dx};
      },
      linear_parameters(weight, bias));
  return y;
}

}  // namespace zero::fn
