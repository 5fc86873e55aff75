// Tensor-parallel communication as recorded ops (graph/functional.h's kind:
// each runs its collective and records the conjugate one as its backward
// rule), so a tensor-parallel layer writes forward only:
//
//   copy_to_group      identity        | all-reduce dx   (Megatron's f)
//   reduce_from_group  all-reduce      | identity        (Megatron's g)
//   gather_sequence    all-gather S    | reduce-scatter  (sequence parallelism)
//   scatter_sequence   reduce-scatter  | all-gather S
//   exchange_rows      all-to-all-v    | the reverse all-to-all-v (expert
//                                        parallelism's dispatch and combine)
//
// plus the fused linears the layers need to keep what they kept by hand:
// linear_partial (a row-parallel layer's partial product: its bias joins on
// one rank only), linear_gathered (a sequence-parallel column layer that
// keeps its input shard, not the gathered sequence, and gathers it again in
// backward) and linear_copy_to_group (a column layer whose backward overlaps
// dx's all-reduce with the weight gradient's GEMM, Megatron's
// async input-gradient all-reduce).
//
// Sequence shards: activations [B, S, C] split along S over the group, rank
// r holding positions [r S/T, (r + 1) S/T) of every sample
// (graph/sequence_parallel.h). A failed collective is noted on the Context
// (Context::take_status) naming the module whose call ran it; the pass goes
// on with the local values. With a group of one rank every op is the
// identity and records nothing.
#pragma once

#include "comm/communicator.h"
#include "graph/context.h"

namespace zero::fn {

// Megatron's f: x itself (no copy; the tape reads the output where later ops
// read x). Backward: dy summed over the group, in place when the rule may
// overwrite it, else into a new buffer. Saves nothing.
Tensor copy_to_group(Context& ctx, const Tensor& x, Communicator& group);
// Megatron's g: x summed over the group, in place in x's buffer, which the
// caller hands over (into a new buffer when something else still holds it).
// Backward: the identity. Saves nothing.
Tensor reduce_from_group(Context& ctx, Tensor&& x, Communicator& group);
// shard [B, S/T, C] of every rank -> [B, S, C]. Backward: reduce-scatter of
// dy, this rank's shard of the sum. Saves nothing.
Tensor gather_sequence(Context& ctx, const Tensor& shard, Communicator& group);
// Partial sums [B, S, C] of every rank -> this rank's shard of their sum
// [B, S/T, C] (S must divide by T). Backward: all-gather of dy. Saves nothing.
Tensor scatter_sequence(Context& ctx, const Tensor& full, Communicator& group);

// Expert parallelism's exchange: x holds rows [sum send_rows, C], the first
// send_rows[0] for group rank 0, the next send_rows[1] for rank 1, and so
// on; the result [sum recv_rows, C] holds the rows each rank q sent here, in
// rank order (recv_rows[q] from q, which must be what q sends here).
// Backward: the reverse exchange of dy. Saves nothing.
Tensor exchange_rows(Context& ctx, const Tensor& x, const std::vector<int64_t>& send_rows,
                     const std::vector<int64_t>& recv_rows, Communicator& group);

// x W^T + b with b (may be null) added on the group's rank 0 only, so a sum
// over the group holds it once (a row-parallel layer's partial product); b's
// gradient is the whole one on every rank (dy is the same on all). Saves x.
Tensor linear_partial(Context& ctx, const Tensor& x, Communicator& group, Parameter& weight,
                      Parameter* bias = nullptr);
// fn::linear of gather_sequence(shard) that saves the shard only: backward
// gathers it again, computes the whole sequence's dx and reduce-scatters it
// (Megatron-SP's column-parallel layer; the gathered input is never kept).
Tensor linear_gathered(Context& ctx, const Tensor& shard, Communicator& group, Parameter& weight,
                       Parameter* bias = nullptr);

// fn::linear(copy_to_group(x)) computed the same way, bit for bit, with a
// backward that overlaps: dx = dy W first, then dx's all-reduce STARTS on
// the group's communicator (its progress thread or stream) while this
// thread computes dW += dy^T x (and db), then waits for it (Megatron's
// column-parallel layer with async_tensor_model_parallel_allreduce). The
// same GEMMs and the same reduction as the two ops, so the same bits. The
// reduction runs in dx's buffer, which nothing else reads until the wait.
// Saves x.
Tensor linear_copy_to_group(Context& ctx, const Tensor& x, Communicator& group, Parameter& weight,
                            Parameter* bias = nullptr);

}  // namespace zero::fn
