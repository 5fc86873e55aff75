// DeepSpeed's comms_logger under the engine, as a user reads its summary:
// each ZeRO stage's step shows the collectives that stage is documented to
// issue (stage 0 all-reduces gradients; 1 and 2 reduce-scatter them and
// all-gather parameters; 3 all-gathers parameters in forward and backward
// too), and the bytes the logged ops move by nccl-tests' bus factors are
// exactly the step's comm_bytes (what --metrics reports); the step's time
// blocked on collectives (wall_clock_breakdown's communication wait) is part
// of its wall time.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "comm/comm_log.h"
#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

GptConfig tiny_gpt() {
  GptConfig g;
  g.n_layer = 2;
  g.n_head = 2;
  g.d_model = 32;
  g.vocab_size = 96;
  g.seq_len = 16;
  return g;
}

// The bytes a row's ops count in Communicator::bytes_communicated (the same
// integer formulas, per op).
int64_t counted_bytes(const CommLogRow& r) {
  const int64_t w = r.world_size, b = r.message_bytes;
  switch (r.op) {
    case CommOp::kAllReduce:
      return r.count * (2 * (w - 1) * b / w);
    case CommOp::kReduceScatter:
      return r.count * ((w - 1) * b / w);
    case CommOp::kAllGather:
      return r.count * ((w - 1) * (b / w));
    default:
      return 0;  // not in this test's steps (the host scalars are not counted)
  }
}

TEST(CommsLoggerTest, EachStagesCollectivesAndBytesAreTheStepsCommBytes) {
  const int w = world().world_size();
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    CommLog log;
    world().set_log(&log, "data");
    CpuBackend backend;
    EngineConfig ec;
    ec.micro_batch_size = 2;
    ec.gradient_accumulation_steps = 2;
    ec.zero.stage = static_cast<ZeroStage>(stage);
    auto engine = Engine::create(std::make_unique<Gpt>(tiny_gpt()), ec, backend, &world()).value();
    log.reset();  // the engine's set-up (initial broadcasts) aside
    std::vector<int32_t> in(2 * 16), tg(2 * 16);
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>((i * 5 + world().rank()) % 96);
      tg[i] = static_cast<int32_t>((i * 3 + 1) % 96);
    }
    const Batch batch{Tensor::wrap(in.data(), {2, 16}, DType::kI32), Tensor::wrap(tg.data(), {2, 16}, DType::kI32)};
    const auto t0 = std::chrono::steady_clock::now();
    const StepResult r = engine->train_batch([&](int) -> absl::StatusOr<Batch> { return batch; }).value();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // The time blocked on collectives is part of the step's (it may be 0:
    // collectives can finish before the compute thread asks).
    EXPECT_GE(r.comm_wait_s, 0.0);
    EXPECT_LE(r.comm_wait_s, wall);
    engine.reset();
    world().set_log(nullptr);

    std::map<CommOp, int64_t> count;
    int64_t bytes = 0;
    for (const CommLogRow& row : log.rows()) {
      count[row.op] += row.count;
      bytes += counted_bytes(row);
      EXPECT_EQ(row.group, "data");
      EXPECT_EQ(row.world_size, w);
      if (w > 1) EXPECT_GT(row.total_ms, 0.0) << comm_op_name(row.op);
    }
    EXPECT_EQ(bytes, r.comm_bytes) << log.summary();
    if (w == 1) continue;
    if (stage == 0) {
      EXPECT_GT(count[CommOp::kAllReduce], 0) << log.summary();
      EXPECT_EQ(count[CommOp::kReduceScatter], 0) << log.summary();
      EXPECT_EQ(count[CommOp::kAllGather], 0) << log.summary();
    } else {
      EXPECT_EQ(count[CommOp::kAllReduce], 0) << log.summary();
      EXPECT_GT(count[CommOp::kReduceScatter], 0) << log.summary();
      EXPECT_GT(count[CommOp::kAllGather], 0) << log.summary();
    }
    EXPECT_GT(count[CommOp::kAllReduceScalars], 0) << log.summary();  // the loss and the gradient norm
  }
}

}  // namespace
}  // namespace zero
