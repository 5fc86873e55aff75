// An MLP-Mixer image classifier (Tolstikhin et al., 2021), written as a user
// of ZeroEngine writes a model of their own: modules that implement `forward`
// only, from the library's layers (Linear, LayerNorm, Gelu, Sequential) and
// graph/functional.h's recorded ops; the backward is the replay of what
// forward recorded (graph/tape.h), and the engine's per-module hooks (ZeRO-3
// gathers, gradient buckets, checkpoint recompute) run as for built-in layers.
//
//   forward(patches fp32 [B, P, patch_dim]) -> logits fp32 [B, classes]
//
// stem Linear -> `blocks` mixer blocks -> LayerNorm -> mean over the P
// patches -> head Linear. A block mixes across patches, then across channels:
//   h = x + swap(token_mlp(swap(token_norm(x))))      token_mlp over P
//   y = h + channel_mlp(channel_norm(h))               channel_mlp over C
// where swap is [B, P, C] <-> [B, C, P]. The blocks are the model's
// checkpointable layers (activation checkpointing maps onto them).
// Header-only, so the example (examples/train_mixer.cc) and its gradient
// test (tests/examples/mixer_test.cc) run the very same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/functional.h"
#include "graph/layers.h"

namespace example {

struct MixerConfig {
  int64_t patches = 16;         // P: tokens per image
  int64_t patch_dim = 16;       // values per patch (its pixels, flattened)
  int64_t channels = 32;        // C: the width of every token
  int64_t token_hidden = 32;    // the token-mixing MLP's hidden width
  int64_t channel_hidden = 64;  // the channel-mixing MLP's hidden width
  int64_t blocks = 2;
  int64_t classes = 4;
  float init_std = 0.1f;        // N(0, init_std) for Linear weights; biases 0, norms 1
};

// [B, M, N] -> [B, N, M]: fn::transpose12 on a [B, M, N, 1] view (a view of
// a value is that value, so the transpose's rule routes the gradient back).
inline zero::Tensor swap_last_two(zero::Context& ctx, const zero::Tensor& x) {
  const zero::Tensor y = zero::fn::transpose12(ctx, x.view({x.dim(0), x.dim(1), x.dim(2), 1}));
  return y.view({x.dim(0), x.dim(2), x.dim(1)});
}

// x [B, P, C] -> its mean over P, [B, C]: x^T w with w [B, P, 1] all 1/P, a
// constant this call makes (not a value of the call, so it gets no gradient).
inline zero::Tensor mean_over_patches(zero::Context& ctx, const zero::Tensor& x) {
  const int64_t b = x.dim(0), p = x.dim(1), c = x.dim(2);
  const zero::Tensor w = ctx.backend().empty({b, p, 1}, zero::DType::kF32, zero::MemCategory::kActivations);
  zero::upload_fp32(ctx.backend(), std::vector<float>(static_cast<size_t>(b * p), 1.0f / static_cast<float>(p)), w);
  zero::MatmulSpec spec;
  spec.trans_a = true;  // [B, P, C]^T [B, P, 1] = [B, C, 1]
  return zero::fn::matmul(ctx, x, w, spec).view({b, c});
}

class MixerBlock : public zero::Module {
 public:
  MixerBlock(std::string name, const MixerConfig& c) : Module(std::move(name)) {
    token_norm_ = add_child<zero::LayerNorm>("token_norm", c.channels);
    token_mlp_ = add_mlp("token_mlp", c.patches, c.token_hidden, c.init_std);
    channel_norm_ = add_child<zero::LayerNorm>("channel_norm", c.channels);
    channel_mlp_ = add_mlp("channel_mlp", c.channels, c.channel_hidden, c.init_std);
  }

  // x [B, P, C] -> [B, P, C]
  zero::Tensor forward(zero::Context& ctx, const zero::Tensor& x) override {
    // Token mixing: one MLP across the patches, shared by every channel, so
    // the patch axis goes last for it and back after.
    const zero::Tensor across = swap_last_two(ctx, ctx.forward(*token_norm_, x));
    const zero::Tensor h = zero::fn::add(ctx, x, swap_last_two(ctx, ctx.forward(*token_mlp_, across)));
    // Channel mixing: one MLP across the channels, shared by every patch.
    return zero::fn::add(ctx, h, ctx.forward(*channel_mlp_, ctx.forward(*channel_norm_, h)));
  }

 private:
  // width -> hidden -> width over the last dimension, GELU between.
  zero::Sequential* add_mlp(const std::string& name, int64_t width, int64_t hidden, float init_std) {
    auto* mlp = add_child<zero::Sequential>(name);
    mlp->add<zero::Linear>("fc1", width, hidden, true, init_std);
    mlp->add<zero::Gelu>("act");
    mlp->add<zero::Linear>("fc2", hidden, width, true, init_std);
    return mlp;
  }

  zero::Module *token_norm_, *token_mlp_, *channel_norm_, *channel_mlp_;
};

class Mixer : public zero::Module {
 public:
  explicit Mixer(const MixerConfig& c) : Module(""), config_(c) {
    stem_ = add_child<zero::Linear>("stem", c.patch_dim, c.channels, true, c.init_std);
    for (int64_t i = 0; i < c.blocks; ++i) blocks_.push_back(add_child<MixerBlock>("blocks." + std::to_string(i), c));
    norm_ = add_child<zero::LayerNorm>("norm", c.channels);
    head_ = add_child<zero::Linear>("head", c.channels, c.classes, true, c.init_std);
  }

  // patches [B, P, patch_dim] -> logits [B, classes]
  zero::Tensor forward(zero::Context& ctx, const zero::Tensor& patches) override {
    zero::Tensor h = ctx.forward(*stem_, patches);
    for (zero::Module* block : blocks_) h = ctx.forward(*block, h);
    return ctx.forward(*head_, mean_over_patches(ctx, ctx.forward(*norm_, h)));
  }
  std::vector<zero::Module*> checkpointable_layers() override { return blocks_; }
  const MixerConfig& config() const { return config_; }

 private:
  MixerConfig config_;
  zero::Module *stem_, *norm_, *head_;
  std::vector<zero::Module*> blocks_;
};

}  // namespace example
