// The built-in layers: Linear, LayerNorm, RmsNorm, Gelu, Dropout, Embedding,
// PositionalEmbedding, TiedLMHead, Sequential. Each saves exactly what its
// backward needs and nothing else (the saved tensors are listed per class).
// Input tensors are never modified in place. All write forward only:
// graph/functional.h's ops record their backward.
#pragma once

#include <functional>

#include "graph/context.h"
#include "graph/module.h"

namespace zero {

// y = x W^T + b over the last dimension; W is [out, in] (nn.Linear layout).
// Saves: x.
class Linear : public Module {
 public:
  Linear(std::string name, int64_t in_features, int64_t out_features, bool bias, float init_std);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

// Layer norm over the last dimension, eps 1e-5, weight 1 / bias 0 at init.
// Saves: x, mean, var.
class LayerNorm : public Module {
 public:
  LayerNorm(std::string name, int64_t features, float eps = 1e-5f);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }
  float eps() const { return eps_; }

 private:
  int64_t features_;
  float eps_;
  Parameter* weight_;
  Parameter* bias_;
};

// RMSNorm over the last dimension (Llama's), weight 1 at init.
// Saves: x, rstd.
class RmsNorm : public Module {
 public:
  RmsNorm(std::string name, int64_t features, float eps);
  Tensor forward(Context& ctx, const Tensor& x) override;
  Parameter* weight() const { return weight_; }
  float eps() const { return eps_; }

 private:
  int64_t features_;
  float eps_;
  Parameter* weight_;
};

// GELU, tanh form. Saves: x.
class Gelu : public Module {
 public:
  explicit Gelu(std::string name) : Module(std::move(name)) {}
  Tensor forward(Context& ctx, const Tensor& x) override;
};

// Dropout with probability p of x [B, T, C]: the mask is a pure function of
// (the context's seed, this layer's id, the global sample, t, c)
// (kernels/dropout_mask.h), regenerated in backward. Active only with grad
// enabled; with grad disabled (evaluation) it returns x itself.
// Saves nothing.
class Dropout : public Module {
 public:
  // layer_id: distinct for every dropout site of a model (its mask stream).
  // sequence_group: x is this rank's sequence-parallel shard (positions
  // [r T', (r + 1) T') of each sample for rank r of the group, T' = x's T),
  // so t counts from r T' and the masks are the whole sequence's.
  Dropout(std::string name, float p, int64_t layer_id, const Communicator* sequence_group = nullptr);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  float p_;
  int64_t layer_id_;
  const Communicator* sequence_group_;
};

// Token embedding: int32 ids [...] -> [..., dim]. Backward returns an
// undefined tensor (ids have no gradient). Saves: ids.
class Embedding : public Module {
 public:
  Embedding(std::string name, int64_t num_embeddings, int64_t dim, float init_std);
  Tensor forward(Context& ctx, const Tensor& ids) override;
  Parameter* weight() const { return weight_; }

 private:
  int64_t num_, dim_;
  Parameter* weight_;
};

// Learned absolute positions: y[b, t] = x[b, t] + P[t] for x [B, T, dim].
// Saves nothing.
class PositionalEmbedding : public Module {
 public:
  PositionalEmbedding(std::string name, int64_t max_positions, int64_t dim, float init_std);
  Tensor forward(Context& ctx, const Tensor& x) override;

 private:
  Parameter* weight_;
};

// Output projection that reuses an embedding table (GPT-2's weight tying):
// logits = x E^T with E [vocab, dim]. The table is a shared parameter, so its
// gradient gets this module's contribution and the embedding's. Saves: x.
class TiedLMHead : public Module {
 public:
  TiedLMHead(std::string name, Parameter* table);
  Tensor forward(Context& ctx, const Tensor& x) override;

 protected:
  Parameter& table() const { return *table_; }

 private:
  Parameter* table_;
};

// Children run in order (backward, recorded, in reverse).
class Sequential : public Module {
 public:
  explicit Sequential(std::string name) : Module(std::move(name)) {}
  template <typename M, typename... Args>
  M* add(const std::string& local_name, Args&&... args) {
    return add_child<M>(local_name, std::forward<Args>(args)...);
  }
  Tensor forward(Context& ctx, const Tensor& x) override;
};

// Flattens all leading dimensions: [..., c] -> [n, c].
Tensor as_rows(const Tensor& t, int64_t cols);
// s with its last dimension replaced by `last`.
Shape with_last_dim(const Shape& s, int64_t last);

// The affine map of every linear op (graph/functional.h's and
// graph/collective_ops.h's), over the last dimension of x: y = x W^T + b with
// W [out, in] (bias may be undefined); and its gradients at input x: dx = dy
// W returned, dW += dy^T x, db += sum(dy) into whichever gradients are
// defined (bias may be null).
Tensor affine_apply(Context& ctx, const Tensor& x, const Parameter& weight, const Tensor& bias);
// dx_ready, when given, runs once dx is computed, before the weight and bias
// gradients (Megatron's async all-reduce of dx starts there).
Tensor affine_grads(Context& ctx, const Tensor& dy, const Tensor& x, Parameter& weight, Parameter* bias,
                    const std::function<void(const Tensor& dx)>& dx_ready = nullptr);

}  // namespace zero
