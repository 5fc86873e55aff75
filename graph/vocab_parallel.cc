// Megatron's vocabulary-parallel layers and loss; see vocab_parallel.h.
#include "graph/vocab_parallel.h"

#include "core/status.h"
#include "core/strings.h"
#include "graph/collective_ops.h"
#include "graph/functional.h"

namespace zero {

// ---- VocabParallelEmbedding
VocabParallelEmbedding::VocabParallelEmbedding(std::string name, int64_t vocab, int64_t dim, float init_std,
                                               Communicator& group, bool sequence_parallel)
    : Module(std::move(name)),
      group_(group),
      sequence_parallel_(sequence_parallel),
      rows_(even_split(vocab, group.world_size(), group.rank())) {
  ZE_CHECK(rows_.size > 0) << this->name() << ": a vocabulary of " << vocab << " over a tensor group of "
                           << group.world_size() << " leaves rank " << group.rank() << " no rows";
  weight_ = add_parameter("weight", {rows_.size, dim}, ParamInit::normal(init_std));
  weight_->set_slice({{vocab, dim}, 0, rows_.offset});
}

Tensor VocabParallelEmbedding::forward(Context& ctx, const Tensor& ids) {
  Tensor rows = fn::embedding_slice(ctx, ids, *weight_, rows_.offset);
  if (sequence_parallel_) return fn::scatter_sequence(ctx, rows, group_);
  return fn::reduce_from_group(ctx, std::move(rows), group_);
}

// ---- VocabParallelLMHead
VocabParallelLMHead::VocabParallelLMHead(std::string name, const VocabParallelEmbedding& embedding)
    : TiedLMHead(std::move(name), embedding.weight()),
      group_(embedding.group()),
      sequence_parallel_(embedding.sequence_parallel()) {}

Tensor VocabParallelLMHead::forward(Context& ctx, const Tensor& x) {
  // Each rank's dx is its slice's part of dlogits E: summed over the group.
  if (!sequence_parallel_) return fn::linear(ctx, fn::copy_to_group(ctx, x, group_), table());
  return fn::linear_gathered(ctx, x, group_, table());
}

// ---- the loss
absl::Status vocab_parallel_cross_entropy(Backend& backend, Communicator& group, const Tensor& logits,
                                          const Tensor& targets, int64_t first, float grad_scale,
                                          const Tensor& losses) {
  const int64_t cols = logits.dim(-1), rows = logits.numel() / cols;
  Tensor max = backend.empty({rows}, DType::kF32, MemCategory::kActivations);
  Tensor sums = backend.empty({rows, 2}, DType::kF32, MemCategory::kActivations);
  Ops& ops = backend.ops();
  ops.row_max(logits, max);
  ZE_RETURN_IF_ERROR(annotate(group.all_reduce(max.data(), rows, DType::kF32, ReduceOp::kMax),
                              "vocabulary-parallel cross-entropy: the all-reduce of the row maxima"));
  ops.cross_entropy_slice_exp(logits, targets, first, max, sums);
  ZE_RETURN_IF_ERROR(annotate(group.all_reduce(sums.data(), 2 * rows, DType::kF32, ReduceOp::kSum),
                              "vocabulary-parallel cross-entropy: the all-reduce of the sums"));
  ops.cross_entropy_slice_finish(logits, targets, first, max, sums, grad_scale, losses);
  return absl::OkStatus();
}

}  // namespace zero
