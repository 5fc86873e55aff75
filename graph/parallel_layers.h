// Megatron-LM's tensor-parallel Linear layers over a tensor group of T ranks
// (comm/device_mesh.h's tensor group; the ranks of one group hold the slices
// of one layer). Each holds its slice of the unsplit Linear's parameters
// (Parameter::slice), so its initial values are that slice of the unsplit
// layer's, and a column-parallel layer followed by a row-parallel one (an MLP,
// attention's QKV and output) computes the unsplit pair with one all-reduce
// in forward and one in backward:
//
//   ColumnParallelLinear  y_r = x W_r^T + b_r      W_r: rows [r out/T, (r+1) out/T) of W
//                         dx  = sum_r dy_r W_r     (all-reduce: Megatron's f)
//   RowParallelLinear     y   = sum_r x_r W_r^T + b  W_r: columns [r in/T, (r+1) in/T) of W
//                         dx_r = dy W_r            (no communication: Megatron's g)
//
// The ranges need not be equal: a layer may be given this rank's range
// (a SplitRange), as AutoTP splits 3 key/value heads over 2 ranks as 2 + 1
// and an MLP width T does not divide by even_split. Nothing above depends
// on equal slices: the all-reduces are of whole activations.
//
// Both write forward only: the communication is graph/collective_ops.h's
// ops (copy_to_group before the column layer's linear, reduce_from_group
// after the row layer's), whose rules do the backward's. A failed all-reduce
// is noted on the Context (Context::take_status) and the pass goes on with
// the local values, as a failed gather does.
//
// With sequence_parallel (graph/sequence_parallel.h) the activations between
// the pair are sequence shards: the column-parallel layer all-gathers its
// input along the sequence (keeping only the shard for backward, where it
// gathers it again: fn::linear_gathered) and reduce-scatters dx; the
// row-parallel layer reduce-scatters its output instead of all-reducing it
// (fn::scatter_sequence) and all-gathers dy.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "graph/context.h"
#include "graph/module.h"

namespace zero {

// Part `index` of `n` split into `parts` contiguous ranges as equal as can
// be: the first n mod parts ranges one longer (a vocabulary that does not
// divide by the tensor size splits this way; nothing is padded).
struct SplitRange {
  int64_t offset = 0, size = 0;
};
SplitRange even_split(int64_t n, int parts, int index);

// Output features split across the group: this rank computes out/T of them
// (or the range it is given).
// With blocks > 1 the output features are that many equal blocks, each split
// across the group (attention's fused QKV: blocks 3, so each rank computes
// q, k and v of its heads). Saves: x.
class ColumnParallelLinear : public Module {
 public:
  // out_features / blocks must divide by the group's size.
  ColumnParallelLinear(std::string name, int64_t in_features, int64_t out_features, bool bias, float init_std,
                       Communicator& group, int64_t blocks = 1, bool sequence_parallel = false);
  // This rank computes output features [local.offset, local.offset + local.size)
  // of out_features, whatever the other ranks' ranges (one block).
  ColumnParallelLinear(std::string name, int64_t in_features, int64_t out_features, SplitRange local, bool bias,
                       float init_std, Communicator& group, bool sequence_parallel = false);
  // Uneven blocks: the output features are blocks of block_sizes[b] features
  // each, in order (grouped-query attention's fused [q; k; v] of H D, G D and
  // G D rows; a fused [gate; up]), and this rank computes range local[b] of
  // each block (its heads' q, k and v); the weight is those ranges in block
  // order (ParamSlice::runs).
  ColumnParallelLinear(std::string name, int64_t in_features, const std::vector<int64_t>& block_sizes,
                       const std::vector<SplitRange>& local, bool bias, float init_std, Communicator& group,
                       bool sequence_parallel = false);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }
  int64_t local_out() const { return weight_->shape()[0]; }
  // tensor_parallel.tp_overlap_comm: without sequence parallelism, backward
  // overlaps dx's all-reduce with the weight gradient (fn::linear_copy_to_group;
  // the same bits as without). Off by default.
  void set_overlap_comm(bool on) { overlap_comm_ = on; }
  bool overlap_comm() const { return overlap_comm_; }

 private:
  // Parameters of `part` features per block at `offset` in each of `blocks` blocks.
  void add_parameters(int64_t in_features, int64_t out_features, int64_t offset, int64_t part, int64_t blocks,
                      bool bias, float init_std);
  // Parameters of the given runs of the out_features (ParamSlice::runs).
  void add_parameters(int64_t in_features, int64_t out_features, std::vector<ParamSlice::Run> runs, bool bias,
                      float init_std);

  Communicator& group_;
  bool sequence_parallel_;
  bool overlap_comm_ = false;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

// Input features split across the group: this rank takes in/T of them, or
// the range it is given (a column-parallel layer's output), and the partial
// products are summed. The bias is whole on every rank, added once; its
// gradient is the same on every rank of the group. Saves: x.
class RowParallelLinear : public Module {
 public:
  // in_features must divide by the group's size.
  RowParallelLinear(std::string name, int64_t in_features, int64_t out_features, bool bias, float init_std,
                    Communicator& group, bool sequence_parallel = false);
  // This rank takes input features [local.offset, local.offset + local.size)
  // of in_features (the matching column-parallel layer's range).
  RowParallelLinear(std::string name, int64_t in_features, int64_t out_features, SplitRange local, bool bias,
                    float init_std, Communicator& group, bool sequence_parallel = false);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }
  int64_t local_in() const { return weight_->shape()[1]; }

 private:
  Communicator& group_;
  bool sequence_parallel_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace zero
