// The bytes each rank holds for model state, as the tracking allocator counts
// them, equal the ZeRO paper's formulas plus DeepSpeed's padding, for every
// stage at this world size W (bf16 parameters and gradients, fp32 master
// weights and Adam moments: K = 12):
//   stage 0: params 2 Psi,      grads 2 Psi,      optimizer 12 Psi
//   stage 1: params 2 N,        grads 2 N,        optimizer 12 N/W   (4 Psi + 12 Psi/W)
//   stage 2: params 2 N,        grads 2 N/W,      optimizer 12 N/W   (2 Psi + 14 Psi/W)
//   stage 3: params 2 S,        grads 2 S,        optimizer 12 S     (16 Psi/W)
// where N = Psi padded to a multiple of 2W (one flat buffer) and
// S = sum over parameters of ceil(numel / W) (each parameter padded to W).
// Checked after initialisation and again after a training step (gradient
// buckets and gathered parameters are transient communication buffers).
#include <gtest/gtest.h>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"
#include "tests/testing/tracked_bytes.h"

namespace zero {
namespace {

using testing::world;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 10, .vocab_size = 37, .seq_len = 8};

using testing::Bytes;
using testing::tracked;

// A micro-batch of 2 sequences of 8 tokens (the vectors live as long as it).
struct Tokens {
  std::vector<int32_t> ids, targets;
  Tokens() : ids(16), targets(16) {
    for (int i = 0; i < 16; ++i) ids[i] = i % 37, targets[i] = (i + 1) % 37;
  }
  Batch batch() {
    return {Tensor::wrap(ids.data(), {2, 8}, DType::kI32), Tensor::wrap(targets.data(), {2, 8}, DType::kI32)};
  }
};

// bf16 parameters and gradients, fp32 master and Adam, 400-element buckets.
EngineConfig config(int stage, int w) {
  EngineConfig ec;
  ec.param_dtype = DType::kBF16;
  ec.micro_batch_size = 2;
  ec.pre_divide = w;
  ec.zero.stage = zero_stage(stage);
  ec.zero.reduce_bucket_size = 400;
  return ec;
}

Bytes expected(int stage, int64_t psi, int64_t s3, int w) {
  const int64_t n = (psi + 2 * w - 1) / (2 * w) * (2 * w);
  switch (stage) {
    case 0: return {2 * psi, 2 * psi, 12 * psi};
    case 1: return {2 * n, 2 * n, 12 * n / w};
    case 2: return {2 * n, 2 * n / w, 12 * n / w};
    default: return {2 * s3, 2 * s3, 12 * s3};
  }
}

TEST(ZeroMemoryTest, ModelStateBytesFollowTheZeroFormulas) {
  const int w = world().world_size();
  Gpt probe(kModel);
  int64_t psi = 0, s3 = 0;
  for (Parameter* p : probe.parameters()) {
    psi += p->numel();
    s3 += (p->numel() + w - 1) / w;
  }
  ASSERT_EQ(psi, 3130);  // odd enough that W = 2, 3, 4 all pad
  Tokens tokens;
  const Batch batch = tokens.batch();
  for (int stage = 0; stage <= 3; ++stage) {
    const Bytes base = tracked();
    CpuBackend backend;
    EngineConfig ec = config(stage, w);
    ec.zero.param_persistence_threshold = 0;  // no persistent full copies at stage 3
    auto engine = initialize(std::make_unique<Gpt>(kModel), ec, backend, &world());
    EXPECT_TRUE(engine.ok()) << engine.status();
    const Bytes want = expected(stage, psi, s3, w);
    for (int phase = 0; phase < 2; ++phase) {
      const Bytes now = tracked();
      EXPECT_EQ(now.params - base.params, want.params) << "stage " << stage << " phase " << phase;
      EXPECT_EQ(now.grads - base.grads, want.grads) << "stage " << stage << " phase " << phase;
      EXPECT_EQ(now.optim - base.optim, want.optim) << "stage " << stage << " phase " << phase;
      (*engine)->forward(batch).value();
      EXPECT_TRUE((*engine)->backward().ok());
      EXPECT_TRUE((*engine)->step().ok());
    }
    if (world().rank() == 0) {
      std::printf("W=%d stage %d: params %lld B, grads %lld B, optimizer %lld B (Psi = %lld)\n", w, stage,
                  static_cast<long long>(want.params), static_cast<long long>(want.grads),
                  static_cast<long long>(want.optim), static_cast<long long>(psi));
    }
  }
}

// Bytes each rank sends per optimizer step (the communicator's count, as
// --metrics reports it), against the ZeRO paper's 2 Psi (W-1)/W of stage 0's
// all-reduce: stages 1 and 2 move the same (a reduce-scatter of the gradients
// to their owners, then an all-gather of the updated parameters), stage 0 is
// that all-reduce. Every stage's count within 1 % of 2 N (W-1)/W elements.
TEST(ZeroMemoryTest, StagesZeroToTwoSendWhatAnAllReduceSends) {
  const int w = world().world_size();
  if (w == 1) GTEST_SKIP() << "one rank sends nothing";
  Tokens tokens;
  const Batch batch = tokens.batch();
  const int64_t psi = 3130, n = (psi + 2 * w - 1) / (2 * w) * (2 * w);
  const double all_reduce_bytes = 2.0 * static_cast<double>(n) * (w - 1) / w * 2;  // bf16
  for (int stage = 0; stage <= 2; ++stage) {
    CpuBackend backend;
    auto engine = initialize(std::make_unique<Gpt>(kModel), config(stage, w), backend, &world());
    ASSERT_TRUE(engine.ok()) << engine.status();
    (*engine)->forward(batch).value();
    EXPECT_TRUE((*engine)->backward().ok());
    absl::StatusOr<StepResult> r = (*engine)->step();
    ASSERT_TRUE(r.ok()) << r.status();
    const double over = static_cast<double>(r->comm_bytes) / all_reduce_bytes;
    if (world().rank() == 0) std::printf("W=%d stage %d: %lld bytes sent per step, %.3f x the all-reduce's\n", w, stage,
                                         static_cast<long long>(r->comm_bytes), over);
    EXPECT_NEAR(over, 1.0, 0.01) << "stage " << stage;
  }
}

}  // namespace
}  // namespace zero
