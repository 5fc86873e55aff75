// Megatron's tensor-parallel Linear layers; see parallel_layers.h.
#include "graph/parallel_layers.h"

#include <algorithm>

#include "core/check.h"
#include "graph/collective_ops.h"
#include "graph/functional.h"

namespace zero {

namespace {

// This rank's share of `n` features over the group (n must divide).
int64_t share(const std::string& name, int64_t n, const Communicator& group, const char* what) {
  ZE_CHECK(n % group.world_size() == 0)
      << name << ": " << what << " " << n << " do not divide over a tensor group of " << group.world_size();
  return n / group.world_size();
}

}  // namespace

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
  add_parameters(in_features, out_features, group.rank() * part, part, blocks, bias, init_std);
}

ColumnParallelLinear::ColumnParallelLinear(std::string name, int64_t in_features, int64_t out_features,
                                           SplitRange local, bool bias, float init_std, Communicator& group,
                                           bool sequence_parallel)
    : Module(std::move(name)), group_(group), sequence_parallel_(sequence_parallel) {
  ZE_CHECK(local.size >= 1 && local.offset >= 0 && local.offset + local.size <= out_features)
      << this->name() << ": output features [" << local.offset << ", +" << local.size << ") of " << out_features;
  add_parameters(in_features, out_features, local.offset, local.size, 1, bias, init_std);
}

ColumnParallelLinear::ColumnParallelLinear(std::string name, int64_t in_features,
                                           const std::vector<int64_t>& block_sizes,
                                           const std::vector<SplitRange>& local, bool bias, float init_std,
                                           Communicator& group, bool sequence_parallel)
    : Module(std::move(name)), group_(group), sequence_parallel_(sequence_parallel) {
  ZE_CHECK(!block_sizes.empty() && block_sizes.size() == local.size())
      << this->name() << ": " << local.size() << " ranges for " << block_sizes.size() << " blocks";
  std::vector<ParamSlice::Run> runs;
  int64_t start = 0;  // the block's first feature
  for (size_t b = 0; b < block_sizes.size(); ++b) {
    ZE_CHECK(local[b].size >= 1 && local[b].offset >= 0 && local[b].offset + local[b].size <= block_sizes[b])
        << this->name() << ": block " << b << "'s features [" << local[b].offset << ", +" << local[b].size << ") of "
        << block_sizes[b];
    runs.push_back({start + local[b].offset, local[b].size});
    start += block_sizes[b];
  }
  add_parameters(in_features, start, std::move(runs), bias, init_std);
}

void ColumnParallelLinear::add_parameters(int64_t in_features, int64_t out_features,
                                          std::vector<ParamSlice::Run> runs, bool bias, float init_std) {
  int64_t local_out = 0;
  for (const ParamSlice::Run& r : runs) local_out += r.size;
  weight_ = add_parameter("weight", {local_out, in_features}, ParamInit::normal(init_std));
  weight_->set_slice({.global_shape = {out_features, in_features}, .dim = 0, .runs = runs});
  if (bias) {
    bias_ = add_parameter("bias", {local_out}, ParamInit::zeros());
    bias_->set_slice({.global_shape = {out_features}, .dim = 0, .runs = std::move(runs)});
  }
}

void ColumnParallelLinear::add_parameters(int64_t in_features, int64_t out_features, int64_t offset, int64_t part,
                                          int64_t blocks, bool bias, float init_std) {
  const int64_t local_out = part * blocks;
  weight_ = add_parameter("weight", {local_out, in_features}, ParamInit::normal(init_std));
  weight_->set_slice({{out_features, in_features}, 0, offset, blocks});
  if (bias) {
    bias_ = add_parameter("bias", {local_out}, ParamInit::zeros());
    bias_->set_slice({{out_features}, 0, offset, blocks});
  }
}

Tensor ColumnParallelLinear::forward(Context& ctx, const Tensor& x) {
  // With sequence parallelism the shard is what is kept; backward gathers it again.
  if (sequence_parallel_) return fn::linear_gathered(ctx, x, group_, *weight_, bias_);
  if (overlap_comm_) return fn::linear_copy_to_group(ctx, x, group_, *weight_, bias_);
  return fn::linear(ctx, fn::copy_to_group(ctx, x, group_), *weight_, bias_);
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

RowParallelLinear::RowParallelLinear(std::string name, int64_t in_features, int64_t out_features, SplitRange local,
                                     bool bias, float init_std, Communicator& group, bool sequence_parallel)
    : Module(std::move(name)), group_(group), sequence_parallel_(sequence_parallel) {
  ZE_CHECK(local.size >= 1 && local.offset >= 0 && local.offset + local.size <= in_features)
      << this->name() << ": input features [" << local.offset << ", +" << local.size << ") of " << in_features;
  weight_ = add_parameter("weight", {out_features, local.size}, ParamInit::normal(init_std));
  weight_->set_slice({{out_features, in_features}, 1, local.offset});
  if (bias) bias_ = add_parameter("bias", {out_features}, ParamInit::zeros());
}

// The partial product x_r W_r^T (the bias on the group's first rank only),
// summed over the group (reduce-scattered along the sequence with sequence
// parallelism). In backward dx_r = dy W_r; dy is the same on every rank (with
// sequence parallelism once gathered), and so is the bias gradient.
Tensor RowParallelLinear::forward(Context& ctx, const Tensor& x) {
  Tensor partial = fn::linear_partial(ctx, x, group_, *weight_, bias_);
  if (sequence_parallel_) return fn::scatter_sequence(ctx, partial, group_);
  return fn::reduce_from_group(ctx, std::move(partial), group_);
}

}  // namespace zero
