// What the offload tests share (nvme_offload_test.cc, cpu_offload_test.cc):
// a tiny GPT, its deterministic batches (each rank its own rows), training a
// few steps through the engine, the fp32 master weights gathered from every
// rank, and the tracked bytes of one tier and category. Every rank calls the
// collectives in the same order (see mpi_test_main.h).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/core/memory_tracker.h"
#include "runtime/engine/engine.h"
#include "runtime/graph/gpt.h"
#include "tests/zero/mpi_test_main.h"

namespace zero::offload_test {

using testing::world;

inline const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 37, .seq_len = 8};
inline constexpr int64_t kMicroBatch = 3;
inline constexpr int kSteps = 5;
inline constexpr int64_t kSubGroup = 1000;  // elements: several sub-groups per partition

inline int32_t token(int64_t row, int64_t t) { return static_cast<int32_t>((row * 7 + t * 3) % 37); }

// kMicroBatch rows of tokens from `first_row` on; the batch views this
// object's vectors, so it lives as long as the batch is used.
struct Rows {
  std::vector<int32_t> ids, targets;
  Batch make(int64_t first_row) {
    ids.clear();
    targets.clear();
    for (int64_t r = first_row; r < first_row + kMicroBatch; ++r)
      for (int64_t t = 0; t < kModel.seq_len; ++t) {
        ids.push_back(token(r, t));
        targets.push_back(token(r, t + 1));
      }
    return {Tensor::wrap(ids.data(), {kMicroBatch, kModel.seq_len}, DType::kI32),
            Tensor::wrap(targets.data(), {kMicroBatch, kModel.seq_len}, DType::kI32)};
  }
};

// A directory every rank sees: rank 0 names it, everyone creates it.
inline std::string shared_dir(const std::string& name) {
  const std::string dir = (std::filesystem::current_path() / name).string();
  std::filesystem::create_directories(dir);
  return dir;
}

inline int64_t tracked(Tier t, MemCategory c) { return MemoryTracker::global().snapshot().at(t, c).current; }

// Steps [from, to) of the run; each step's mean loss over all ranks.
inline void train_steps(Engine& engine, int from, int to, std::vector<double>& losses) {
  Rows rows;
  const int w = world().world_size(), r = world().rank();
  for (int step = from; step < to; ++step) {
    engine.forward(rows.make((step * w + r) * kMicroBatch));
    EXPECT_TRUE(engine.backward().ok());
    absl::StatusOr<StepResult> s = engine.step();
    EXPECT_TRUE(s.ok()) << s.status();
    losses.push_back(s.ok() ? s->loss : -1.0);
  }
}

// Every parameter's fp32 master weights, gathered from every rank (a collective).
inline std::vector<std::vector<float>> masters(Engine& engine) {
  std::vector<std::vector<float>> out;
  for (Parameter* p : engine.model().parameters()) {
    absl::StatusOr<std::vector<float>> v = engine.gather_master(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    out.push_back(v.ok() ? *v : std::vector<float>());
  }
  return out;
}

// Every parameter in the model dtype as the model sees it, as fp32 (a
// collective at stage 3).
inline std::vector<std::vector<float>> parameters(Engine& engine) {
  std::vector<std::vector<float>> out;
  for (Parameter* p : engine.model().parameters()) {
    absl::StatusOr<std::vector<float>> v = engine.state().gather_parameter(*p);
    EXPECT_TRUE(v.ok()) << v.status();
    out.push_back(v.ok() ? *v : std::vector<float>());
  }
  return out;
}

}  // namespace zero::offload_test
