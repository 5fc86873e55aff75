// Activation checkpointing changes memory, never results: with the GPT's
// blocks in K checkpoint segments (K = 1, 2 and every block), the losses and
// every weight after 5 steps are bitwise those of the run without, on 1-2
// ranks and at ZeRO stages 0 and 3 (where recompute re-gathers the
// parameters through the same path as forward); and the activation peak
// falls as segments shrink (one segment of every block rebuilds them all at
// once in backward, so its peak is the plain one).
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/backend/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/graph/gpt.h"
#include "tests/zero/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

const GptConfig kModel{.n_layer = 4, .n_head = 2, .d_model = 16, .vocab_size = 53, .seq_len = 16};

struct TrainRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> weights;
  int64_t activation_peak = 0;
};

TrainRun train(int stage, std::optional<int64_t> segments) {
  const int w = world().world_size(), r = world().rank();
  CpuBackend backend;
  EngineConfig ec;
  ec.micro_batch_size = 2;
  ec.pre_divide = w;
  ec.zero.stage = stage;
  ec.zero.param_persistence_threshold = 0;
  ec.zero.max_reuse_distance = 0;  // release everything: recompute must gather again
  ec.activation_checkpointing.number_checkpoints = segments;
  ec.optimizer.lr = 1e-2f;
  auto engine = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  EXPECT_TRUE(engine.ok()) << engine.status();
  std::vector<int32_t> ids(32), targets(32);
  TrainRun out;
  for (int step = 0; step < 5; ++step) {
    for (int i = 0; i < 32; ++i) {
      ids[i] = (i * 3 + step * 7 + r * 11) % 53;
      targets[i] = (ids[i] + 1) % 53;
    }
    MemoryTracker::global().reset_peaks();
    const MemorySnapshot before = MemoryTracker::global().snapshot();
    out.losses.push_back((*engine)->forward(
        {Tensor::wrap(ids.data(), {2, 16}, DType::kI32), Tensor::wrap(targets.data(), {2, 16}, DType::kI32)}));
    EXPECT_TRUE((*engine)->backward().ok());
    const MemorySnapshot after = MemoryTracker::global().snapshot();
    out.activation_peak = after.at(Tier::kHost, MemCategory::kActivations).peak -
                          before.at(Tier::kHost, MemCategory::kActivations).current;
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

}  // namespace
}  // namespace zero
