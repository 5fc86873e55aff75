// Megatron-LM's vocabulary-parallel embedding, output layer and softmax
// cross-entropy over a tensor group of T ranks: rank r holds the rows
// [first_r, first_r + V_r) of the token table (even_split: the vocabulary
// need not divide by T; the first V mod T ranks hold one row more, and
// nothing is padded), so the table, the logits and the loss's work are
// split by T and the full logits are never formed on any rank.
//
//   VocabParallelEmbedding  y = sum_r lookup_r(ids)   (zero rows for ids of other
//                                                      slices; one all-reduce forward)
//                           dE_r += scatter_r(dy)     (dy is the same on every rank)
//   VocabParallelLMHead     logits_r = x E_r^T        (tied to the embedding's slice)
//                           dx = sum_r dlogits_r E_r  (one all-reduce backward)
//   (both write forward only: graph/collective_ops.h's ops do the
//   communication of both passes)
//   vocab_parallel_cross_entropy: per row, the max over the group, then the
//                           sum of exp and the target's logit over the group
//                           (two all-reduces of N and 2N floats), then each
//                           rank's slice of softmax - onehot in place.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "graph/context.h"
#include "graph/layers.h"
#include "graph/parallel_layers.h"

namespace zero {

// Token embedding with the table split by vocabulary rows. Saves: ids.
class VocabParallelEmbedding : public Module {
 public:
  // sequence_parallel: the output is this rank's sequence shard (a
  // reduce-scatter instead of the all-reduce; graph/sequence_parallel.h).
  VocabParallelEmbedding(std::string name, int64_t vocab, int64_t dim, float init_std, Communicator& group,
                         bool sequence_parallel = false);
  Tensor forward(Context& ctx, const Tensor& ids) override;
  Parameter* weight() const { return weight_; }
  // This rank's rows of the vocabulary.
  const SplitRange& rows() const { return rows_; }
  Communicator& group() const { return group_; }
  bool sequence_parallel() const { return sequence_parallel_; }

 private:
  Communicator& group_;
  bool sequence_parallel_;
  SplitRange rows_;
  Parameter* weight_;
};

// The output layer over a vocabulary-parallel table's slice (GPT-2's and a
// tied Llama's token table, or an untied head's own): this rank's logits
// are its vocabulary rows' (logits_vocab_slice of the model). Saves: x. With
// the embedding's sequence_parallel, x is a sequence shard, all-gathered
// first (and again in backward; the shard is what it keeps), and dx is
// reduce-scattered.
class VocabParallelLMHead : public TiedLMHead {
 public:
  VocabParallelLMHead(std::string name, const VocabParallelEmbedding& embedding);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Communicator& group_;
  bool sequence_parallel_;
};

// The softmax cross-entropy of logits [N, w] that are vocabulary columns
// [first, first + w) of each row, the rest on the other ranks of `group`:
// losses [N] as Ops::cross_entropy gives for the whole rows (equal on every
// rank of the group), and logits overwritten with this slice of grad_scale *
// (softmax - onehot). A negative target is an ignored row. Fails with the
// collective's error.
absl::Status vocab_parallel_cross_entropy(Backend& backend, Communicator& group, const Tensor& logits,
                                          const Tensor& targets, int64_t first, float grad_scale,
                                          const Tensor& losses);

}  // namespace zero
