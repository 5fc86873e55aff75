// The MLP-Mixer of examples/mixer.h (the model examples/train_mixer.cc
// trains), as a user's model written with forward only:
//  * its gradients — the input's and every parameter's, element by element —
//    are central differences of its forward (fp32 forward, the loss
//    sum(r * logits) summed in double, h = 1e-2), so the tape's replay
//    through the transposes, the mean pooling's matmul against a constant,
//    the residual adds and the library layers is its derivative;
//  * with each block a checkpoint segment (recomputed in backward) the
//    logits, dx and every parameter gradient are bit for bit the same;
//  * through the engine on one rank, ZeRO-3 with checkpointing and the
//    optimizer on the offload path trains the losses plain stage 0 trains
//    (to fp32 rounding), and they fall.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "examples/mixer.h"
#include "examples/synthetic_images.h"
#include "graph/context.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/central_differences.h"

namespace zero {
namespace {

using example::Mixer;
using example::MixerConfig;

// Small enough for a central difference per parameter: 2 blocks, P = 4
// patches of 3 values, 6 channels.
const MixerConfig kSmall{.patches = 4, .patch_dim = 3, .channels = 6, .token_hidden = 5, .channel_hidden = 7,
                         .blocks = 2, .classes = 3};
constexpr int64_t kBatch = 2;

using testing::random_values;
using testing::upload;

struct Pass {
  std::vector<float> logits, dx;
  std::vector<std::vector<float>> grads;
};

// One forward and backward of dlogits = r, optionally with each block its own checkpoint segment.
Pass run(Backend& backend, Mixer& m, const Tensor& x, const std::vector<float>& r, bool checkpoint) {
  Context ctx(backend, DType::kF32);
  if (checkpoint) {
    std::vector<std::vector<Module*>> segments;
    for (Module* block : m.checkpointable_layers()) segments.push_back({block});
    ctx.set_checkpoint_segments(std::move(segments));
  }
  for (Parameter* p : m.parameters()) backend.ops().fill(p->grad, 0.0f);
  Pass out;
  const Tensor y = ctx.forward(m, x);
  out.logits = download_fp32(backend, y);
  out.dx = download_fp32(backend, ctx.backward(m, upload(backend, r, y.shape())));
  EXPECT_TRUE(ctx.take_status().ok());
  EXPECT_EQ(ctx.live_frames(), 0u);
  for (Parameter* p : m.parameters()) out.grads.push_back(download_fp32(backend, p->grad));
  return out;
}

class MixerTest : public ::testing::Test {
 protected:
  MixerTest() : model_(kSmall) { testing::materialise_random(model_, backend_, 11); }
  Shape input_shape() const { return {kBatch, kSmall.patches, kSmall.patch_dim}; }

  CpuBackend backend_;
  Mixer model_;
  const std::vector<float> xv_ = random_values(static_cast<size_t>(kBatch * kSmall.patches * kSmall.patch_dim), 3);
  const std::vector<float> r_ = random_values(static_cast<size_t>(kBatch * kSmall.classes), 5);
};

TEST_F(MixerTest, GradientsMatchCentralDifferences) {
  const Tensor x = upload(backend_, xv_, input_shape());
  const Pass pass = run(backend_, model_, x, r_, /*checkpoint=*/false);
  ASSERT_EQ(pass.logits.size(), static_cast<size_t>(kBatch * kSmall.classes)) << "logits [B, classes]";
  ASSERT_EQ(pass.dx.size(), xv_.size());

  Context ctx(backend_, DType::kF32);
  const std::vector<Parameter*> params = model_.parameters();
  ASSERT_EQ(params.size(), 2u + 2u * 12u + 2u + 2u) << "stem, 2 blocks (2 norms, 2 MLPs of 2 Linear), norm, head";
  const int64_t checked =
      testing::expect_central_differences(ctx, model_, backend_, xv_, input_shape(), r_, pass.dx, pass.grads, "mixer");
  int64_t numel = 0;
  for (Parameter* p : params) numel += p->numel();
  EXPECT_EQ(checked, numel + static_cast<int64_t>(xv_.size())) << "dx and every parameter element";
}

TEST_F(MixerTest, CheckpointedBlocksGiveTheSameGradientsBitwise) {
  const Tensor x = upload(backend_, xv_, input_shape());
  const Pass plain = run(backend_, model_, x, r_, /*checkpoint=*/false);
  const Pass recomputed = run(backend_, model_, x, r_, /*checkpoint=*/true);
  EXPECT_EQ(recomputed.logits, plain.logits);
  EXPECT_EQ(recomputed.dx, plain.dx);
  ASSERT_EQ(recomputed.grads.size(), plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) EXPECT_EQ(recomputed.grads[i], plain.grads[i]) << "parameter " << i;
}

// The example's losses (its images, model and optimizer) for `steps` steps of 16 images, under `config`.
std::vector<float> train(EngineConfig config, int steps) {
  example::SyntheticImages images({.side = 16, .patch = 4, .classes = 4});
  const MixerConfig model{.patches = images.patches(), .patch_dim = images.patch_dim(), .classes = 4};
  config.micro_batch_size = 16;
  config.optimizer = {.type = OptimizerType::kAdamW, .lr = 3e-3f, .weight_decay = 0.01f};
  CpuBackend backend;
  auto engine = initialize(std::make_unique<Mixer>(model), config, backend);
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    const Batch batch = images.batch(first_global_sample(step, 1, 0, 16), 16);
    EXPECT_TRUE((*engine)->forward(batch).ok());
    EXPECT_TRUE((*engine)->backward().ok());
    absl::StatusOr<StepResult> r = (*engine)->step();
    EXPECT_TRUE(r.ok()) << r.status();
    losses.push_back(r->loss);
  }
  return losses;
}

TEST(MixerEngineTest, Zero3WithCheckpointingAndOffloadTrainsAsStage0) {
  const std::vector<float> plain = train(EngineConfig{}, 20);
  EngineConfig ec;
  ec.zero.stage = ZeroStage::k3;
  ec.zero.param_persistence_threshold = 0;
  ec.zero.offload_optimizer.device = OffloadDevice::kCpu;
  ec.force_offload_path = true;
  ec.activation_checkpointing.number_checkpoints = 2;
  const std::vector<float> sharded = train(ec, 20);
  ASSERT_EQ(sharded.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(sharded[i], plain[i], 1e-5f * plain[i]) << "step " << i + 1;
  EXPECT_LT(plain.back(), 0.5f * plain.front()) << "it learns (from about ln 4 = 1.39)";
}

}  // namespace
}  // namespace zero
