// Activation checkpointing changes memory, never results: with the GPT's
// blocks in K checkpoint segments (K = 1, 2 and every block), the losses and
// every weight after 5 steps are bitwise those of the run without, on 1-2
// ranks and at ZeRO stages 0 and 3 (where recompute re-gathers the
// parameters through the same path as forward); and the activation peak
// falls as segments shrink (one segment of every block rebuilds them all at
// once in backward, so its peak is the plain one). The same with dropout 0.1:
// the masks are a function of (seed, site, global sample), so recompute
// redraws exactly the forward's, and losses, gradients and weights stay
// bitwise those without checkpointing (and differ from a dropout-free run).
//
// cpu_checkpointing on the path a GPU rank takes (EngineConfig::
// force_offload_path: the CPU backend plays the device, the segment inputs'
// host copies live on a host backend of their own, copied out and back on a
// copy stream; graph/context.h): losses, gradients and weights are
// still bitwise those without checkpointing; after forward the "device"
// holds exactly the K segment inputs less than with checkpointing alone, and
// the host holds exactly them (and nothing else, at any time); the device's
// activation peak is no higher.
#include <gtest/gtest.h>

#include <cstring>

#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

const GptConfig kModel{.n_layer = 4, .n_head = 2, .d_model = 16, .vocab_size = 53, .seq_len = 16};

struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> grads;  // stage 0: every parameter's gradient after each backward
  int64_t activation_peak = 0;
  // The compute backend's activations after each forward, and its peak over
  // forward + backward (the last step's).
  int64_t device_after_forward = 0, device_peak = 0;
  // cpu_checkpointing: the host backend's activations after forward and peak.
  int64_t host_after_forward = -1, host_peak = -1;
};

// Bytes of one segment input: a block's input, [micro-batch, seq, d_model] fp32.
const int64_t kSegmentInputBytes = 2 * kModel.seq_len * kModel.d_model * 4;

TrainRun train(int stage, std::optional<int64_t> segments, bool cpu_checkpointing = false, float dropout = 0.0f) {
  const int w = world().world_size(), r = world().rank();
  CpuBackend backend;
  EngineConfig ec;
  ec.force_offload_path = cpu_checkpointing;
  ec.activation_checkpointing.cpu_checkpointing = cpu_checkpointing;
  ec.micro_batch_size = 2;
  ec.pre_divide = w;
  ec.zero.stage = zero_stage(stage);
  ec.zero.param_persistence_threshold = 0;
  ec.zero.max_reuse_distance = 0;  // release everything: recompute must gather again
  ec.activation_checkpointing.number_checkpoints = segments;
  ec.optimizer.lr = 1e-2f;
  GptConfig model = kModel;
  model.dropout = dropout;
  auto engine = initialize(std::make_unique<Gpt>(model), ec, backend, &world());
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> ids(32), targets(32);
  TrainRun out;
  for (int step = 0; step < 5; ++step) {
    for (int i = 0; i < 32; ++i) {
      ids[i] = (i * 3 + step * 7 + r * 11) % 53;
      targets[i] = (ids[i] + 1) % 53;
    }
    MemoryTracker::global().reset_peaks();
    const Backend* host = (*engine)->checkpoint_host_backend();
    EXPECT_EQ(host != nullptr, cpu_checkpointing);
    auto activations = [](const Backend& b) { return b.memory().at(Tier::kHost, MemCategory::kActivations); };
    const MemorySnapshot before = MemoryTracker::global().snapshot();
    const int64_t device_before = activations(backend).current;
    const int64_t host_before = host != nullptr ? activations(*host).current : 0;
    EXPECT_EQ(host_before, 0) << "host copies left from the step before";
    out.losses.push_back((*engine)->forward(
        {Tensor::wrap(ids.data(), {2, 16}, DType::kI32), Tensor::wrap(targets.data(), {2, 16}, DType::kI32)}).value());
    out.device_after_forward = activations(backend).current - device_before;
    if (host != nullptr) out.host_after_forward = activations(*host).current;
    EXPECT_TRUE((*engine)->backward().ok());
    const MemorySnapshot after = MemoryTracker::global().snapshot();
    out.activation_peak = after.at(Tier::kHost, MemCategory::kActivations).peak -
                          before.at(Tier::kHost, MemCategory::kActivations).current;
    out.device_peak = activations(backend).peak - device_before;
    if (host != nullptr) {
      out.host_peak = activations(*host).peak;
      EXPECT_EQ(activations(*host).current, 0) << "host copies outlive backward";
    }
    if (stage == 0) {
      for (Parameter* p : (*engine)->model().parameters()) out.grads.push_back((*engine)->grad_values(*p));
    }
    EXPECT_TRUE((*engine)->step().ok());
  }
  for (Parameter* p : (*engine)->model().parameters()) out.weights.push_back((*engine)->gather_master(*p).value());
  return out;
}

TEST(ActivationCheckpointingTest, BitwiseIdenticalTrainingWithLessActivationMemory) {
  for (int stage : {0, 3}) {
    const TrainRun plain = train(stage, std::nullopt);
    int64_t previous_peak = plain.activation_peak;
    for (int64_t k : {1, 2, 4}) {
      const TrainRun ckpt = train(stage, k);
      EXPECT_EQ(ckpt.losses, plain.losses) << "stage " << stage << ", " << k << " segments";
      EXPECT_TRUE(ckpt.weights == plain.weights) << "stage " << stage << ", " << k << " segments: weights differ";
      // One segment rebuilds every block's activations at once in backward: the
      // same peak as without; more, shorter segments hold less.
      EXPECT_LE(ckpt.activation_peak, plain.activation_peak) << "stage " << stage << ", " << k << " segments";
      if (k > 1) EXPECT_LT(ckpt.activation_peak, previous_peak) << "more segments keep less";
      previous_peak = ckpt.activation_peak;
      if (world().rank() == 0 && stage == 0) {
        std::printf("%d rank(s), %lld segments: activation peak %lld B (without: %lld B)\n", world().world_size(),
                    static_cast<long long>(k), static_cast<long long>(ckpt.activation_peak),
                    static_cast<long long>(plain.activation_peak));
      }
    }
  }
}

TEST(ActivationCheckpointingTest, DropoutRepeatsExactlyOnRecompute) {
  const float p = 0.1f;
  for (int stage : {0, 3}) {
    const TrainRun plain = train(stage, std::nullopt, false, p);
    EXPECT_NE(plain.losses, train(stage, std::nullopt).losses) << "dropout changes nothing";
    for (int64_t k : {1, 2, 4}) {
      const std::string where = cat("dropout ", p, ", stage ", stage, ", ", k, " segments, rank ", world().rank());
      const TrainRun ckpt = train(stage, k, false, p);
      EXPECT_EQ(ckpt.losses, plain.losses) << where;
      EXPECT_TRUE(ckpt.grads == plain.grads) << where << ": gradients differ";
      EXPECT_TRUE(ckpt.weights == plain.weights) << where << ": weights differ";
    }
    // Segment inputs through host memory: still the same masks.
    const TrainRun offloaded = train(stage, 2, /*cpu_checkpointing=*/true, p);
    EXPECT_EQ(offloaded.losses, plain.losses) << "stage " << stage << ", cpu_checkpointing";
    EXPECT_TRUE(offloaded.weights == plain.weights) << "stage " << stage << ", cpu_checkpointing: weights differ";
  }
}

TEST(ActivationCheckpointingTest, CpuCheckpointingOnTheDevicePathIsBitwiseAndMovesSegmentInputsToHost) {
  for (int stage : {0, 3}) {
    const TrainRun plain = train(stage, std::nullopt);
    // Without checkpoint segments the key moves nothing.
    const TrainRun no_segments = train(stage, std::nullopt, /*cpu_checkpointing=*/true);
    EXPECT_EQ(no_segments.losses, plain.losses);
    EXPECT_EQ(no_segments.host_peak, 0);
    EXPECT_EQ(no_segments.device_after_forward, plain.device_after_forward);
    for (int64_t k : {1, 2, 4}) {
      const std::string where = cat("stage ", stage, ", ", k, " segments, rank ", world().rank());
      const TrainRun ckpt = train(stage, k);
      const TrainRun offloaded = train(stage, k, /*cpu_checkpointing=*/true);
      EXPECT_EQ(offloaded.losses, plain.losses) << where;
      EXPECT_TRUE(offloaded.weights == plain.weights) << where << ": weights differ";
      EXPECT_TRUE(offloaded.grads == plain.grads) << where << ": gradients differ";
      EXPECT_EQ(offloaded.losses, ckpt.losses) << where;
      EXPECT_TRUE(offloaded.weights == ckpt.weights) << where << ": weights differ from checkpointing alone";
      // After forward the device holds the K segment inputs less; the host
      // holds exactly them, and never more.
      EXPECT_EQ(ckpt.device_after_forward - offloaded.device_after_forward, k * kSegmentInputBytes) << where;
      EXPECT_EQ(offloaded.host_after_forward, k * kSegmentInputBytes) << where;
      EXPECT_EQ(offloaded.host_peak, k * kSegmentInputBytes) << where;
      EXPECT_LE(offloaded.device_peak, ckpt.device_peak) << where;
      if (world().rank() == 0) {
        std::printf("stage %d, %lld segments: device activations after forward %lld B (checkpointing alone: %lld B), "
                    "host %lld B; device peak %lld B (%lld B)\n",
                    stage, static_cast<long long>(k), static_cast<long long>(offloaded.device_after_forward),
                    static_cast<long long>(ckpt.device_after_forward),
                    static_cast<long long>(offloaded.host_after_forward),
                    static_cast<long long>(offloaded.device_peak), static_cast<long long>(ckpt.device_peak));
      }
    }
  }
}

}  // namespace
}  // namespace zero
