// What the offload tests share (nvme_offload_test.cc, host_offload_test.cc):
// a tiny GPT, its deterministic batches (each rank its own rows), the engine
// config they start from, training a few steps through the engine, the fp32
// master weights gathered from every rank, the tracked bytes of one tier and
// category, and the checkpoint round trip between resident and offloaded
// runs. Every rank calls the collectives in the same order (see
// mpi_test_main.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_tracker.h"
#include "core/strings.h"
#include "graph/gpt.h"
#include "kernels/backend.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"

namespace zero::offload_test {

using testing::world;

inline const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 37, .seq_len = 8};
inline constexpr int64_t kMicroBatch = 3;
inline constexpr int kSteps = 5;
inline constexpr int64_t kSubGroup = 1000;  // elements: several sub-groups per partition

// Every run's config before any offload key: sub-groups much smaller than a
// partition, nothing persistent at stage 3, AdamW.
inline EngineConfig base_config(int stage, DType dtype) {
  EngineConfig ec;
  ec.micro_batch_size = kMicroBatch;
  ec.pre_divide = world().world_size();
  ec.param_dtype = dtype;
  ec.check_grad_overflow = false;
  ec.zero.stage = zero_stage(stage);
  ec.zero.sub_group_size = kSubGroup;
  ec.zero.param_persistence_threshold = 0;
  ec.optimizer = {.type = OptimizerType::kAdamW, .lr = 1e-2f, .weight_decay = 0.01f};
  return ec;
}

// offload_optimizer (or offload_param) on `device`; an NVMe one swaps into
// `swap_dir` through `buffers` buffers.
inline void offload_to(OffloadConfig& o, OffloadDevice device, const std::string& swap_dir, int64_t buffers) {
  o.device = device;
  if (device != OffloadDevice::kNvme) return;
  o.nvme_path = swap_dir;
  o.buffer_count = buffers;
}

// offload_param at stage 3, prefetching a few modules ahead and gathering
// every parameter again in backward (so every gather reads the offloaded shard).
inline void offload_params_to(EngineConfig& ec, OffloadDevice device, const std::string& swap_dir, int64_t buffers) {
  offload_to(ec.zero.offload_param, device, swap_dir, buffers);
  ec.zero.prefetch_bucket_size = 2000;
  ec.zero.max_reuse_distance = 0;
}

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
    EXPECT_TRUE(engine.forward(rows.make((step * w + r) * kMicroBatch)).ok());
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

// A checkpoint directory every rank sees, emptied by rank 0 first (a collective).
inline std::string fresh_checkpoint_dir(const std::string& name) {
  const std::string dir = (std::filesystem::current_path() / cat(name, ".ckpt.np", world().world_size())).string();
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  EXPECT_TRUE(world().barrier().ok());
  return dir;
}

// What a run ends with: its step losses, fp32 master weights and parameters.
struct Finished {
  std::vector<double> losses;
  std::vector<std::vector<float>> master, params;
};

// Steps [0, 5) of a run of `ec`, saving tag "mid" into `ckpt` after step 3.
inline Finished train_saving_mid(const EngineConfig& ec, Backend& backend, const std::string& ckpt) {
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  Finished out;
  train_steps(**e, 0, 3, out.losses);
  EXPECT_TRUE(save_checkpoint(**e, {ckpt, "mid", 0}).ok());
  train_steps(**e, 3, 5, out.losses);
  out.master = masters(**e);
  out.params = parameters(**e);
  return out;
}

// A run of `ec` resuming `ckpt`'s "mid" (saved by train_saving_mid, whose
// first three losses `first` carries): steps [3, 5), then saves tag "end".
inline Finished resume_mid_saving_end(const EngineConfig& ec, Backend& backend, const std::string& ckpt,
                                      const Finished& first) {
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  Finished out;
  out.losses.assign(first.losses.begin(), first.losses.begin() + std::min<size_t>(3, first.losses.size()));
  absl::Status loaded = load_checkpoint(**e, ckpt, "mid");
  EXPECT_TRUE(loaded.ok()) << loaded;
  train_steps(**e, 3, 5, out.losses);
  out.master = masters(**e);
  out.params = parameters(**e);
  EXPECT_TRUE(save_checkpoint(**e, {ckpt, "end", 0}).ok());
  return out;
}

// A run of `ec` that loads `ckpt`'s "end": its master weights and parameters.
inline Finished load_end(const EngineConfig& ec, Backend& backend, const std::string& ckpt) {
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  absl::Status loaded = load_checkpoint(**e, ckpt, "end");
  EXPECT_TRUE(loaded.ok()) << loaded;
  Finished out;
  out.master = masters(**e);
  out.params = parameters(**e);
  return out;
}

}  // namespace zero::offload_test
