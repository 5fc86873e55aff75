// Errors travel: a collective that fails inside a module hook (a stage-3
// gather in forward, a gradient reduction in backward) reaches the caller of
// Engine::forward / backward as that collective's own error, code and
// message, prefixed by the micro-step, instead of an abort further on. The
// fault is injected by tests/testing/faulty_communicator.h. A store that
// fails is a real fault: the NVMe swap file truncated under a running engine
// fails the next step with the I/O engine's own error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "graph/gpt.h"
#include "kernels/cpu/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "tests/offload/offload_test_util.h"
#include "tests/testing/faulty_communicator.h"

namespace zero {
namespace {

using testing::Collective;
using testing::FaultyCommunicator;

const GptConfig kModel{.n_layer = 2, .n_head = 2, .d_model = 16, .vocab_size = 31, .seq_len = 8};

struct FaultyRun {
  CpuBackend backend;
  std::unique_ptr<FaultyCommunicator> comm;
  std::unique_ptr<Engine> engine;
  std::vector<int32_t> ids = std::vector<int32_t>(2 * 8), targets = std::vector<int32_t>(2 * 8);

  FaultyRun(int stage, Collective which, int nth, absl::Status error) {
    comm = std::make_unique<FaultyCommunicator>(make_local_communicator(), which, nth, std::move(error));
    EngineConfig ec;
    ec.micro_batch_size = 2;
    ec.zero.stage = zero_stage(stage);
    ec.zero.param_persistence_threshold = 0;  // every stage-3 parameter is gathered around its use
    auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, comm.get());
    EXPECT_TRUE(e.ok()) << e.status();
    engine = *std::move(e);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>(i % kModel.vocab_size);
      targets[i] = static_cast<int32_t>((i + 1) % kModel.vocab_size);
    }
  }
  Batch batch() {
    return {Tensor::wrap(ids.data(), {2, 8}, DType::kI32), Tensor::wrap(targets.data(), {2, 8}, DType::kI32)};
  }
};

TEST(EngineErrorsTest, AFailedStage3GatherInForwardIsTheForwardsError) {
  FaultyRun r(3, Collective::kAllGather, 2, absl::UnavailableError("MPI_Allgather: rank 1 is gone (injected)"));
  const absl::StatusOr<float> loss = r.engine->forward(r.batch());
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(loss.status().message(), "forward of micro-step 0: MPI_Allgather: rank 1 is gone (injected)");
  EXPECT_GT(r.comm->calls(Collective::kAllGather), 2);  // the pass ran to its end
}

TEST(EngineErrorsTest, AFailedStage3GatherInBackwardIsTheBackwardsError) {
  // A run without the fault counts forward's gathers; the next one is backward's first.
  FaultyRun probe(3, Collective::kAllGather, 1 << 30, absl::OkStatus());
  ASSERT_TRUE(probe.engine->forward(probe.batch()).ok());
  const int forward_gathers = probe.comm->calls(Collective::kAllGather);
  FaultyRun r(3, Collective::kAllGather, forward_gathers, absl::DeadlineExceededError("ncclAllGather: timed out (injected)"));
  ASSERT_TRUE(r.engine->forward(r.batch()).ok());
  const absl::Status s = r.engine->backward();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "backward of micro-step 0: ncclAllGather: timed out (injected)");
}

TEST(EngineErrorsTest, AFailedGradientReductionIsTheBackwardsError) {
  for (int stage : {0, 2, 3}) {
    FaultyRun r(stage, Collective::kAllReduce, 0, absl::InternalError("MPI_Allreduce: MPI_ERR_TRUNCATE (injected)"));
    ASSERT_TRUE(r.engine->forward(r.batch()).ok()) << "stage " << stage;
    const absl::Status s = r.engine->backward();
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << "stage " << stage;
    EXPECT_EQ(s.message(), "backward of micro-step 0: MPI_Allreduce: MPI_ERR_TRUNCATE (injected)") << "stage " << stage;
  }
}

#ifdef ZE_HAVE_NVME_OFFLOAD
TEST(EngineErrorsTest, ATruncatedSwapFileIsTheStepsErrorNamingTheFile) {
  testing::ScratchDir dir("engine_errors_swap");
  ASSERT_TRUE(dir.ok());
  CpuBackend backend;
  EngineConfig ec;
  ec.micro_batch_size = 2;
  ec.zero.stage = ZeroStage::k1;
  ec.zero.sub_group_size = 1000;  // several sub-groups: each step reads the file back
  ec.zero.offload_optimizer.device = OffloadDevice::kNvme;
  ec.zero.offload_optimizer.nvme_path = dir.path();
  ec.zero.offload_optimizer.buffer_count = 2;
  std::unique_ptr<Communicator> comm = make_local_communicator();
  auto e = initialize(std::make_unique<Gpt>(kModel), ec, backend, comm.get());
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<int32_t> ids(16), targets(16);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(i % kModel.vocab_size);
    targets[i] = static_cast<int32_t>((i + 1) % kModel.vocab_size);
  }
  const Batch batch{Tensor::wrap(ids.data(), {2, 8}, DType::kI32), Tensor::wrap(targets.data(), {2, 8}, DType::kI32)};
  auto step = [&]() -> absl::Status {
    if (absl::StatusOr<float> l = (*e)->forward(batch); !l.ok()) return l.status();
    if (absl::Status s = (*e)->backward(); !s.ok()) return s;
    return (*e)->step().status();
  };
  ASSERT_TRUE(step().ok());
  // The swap file has no name in the directory; this process's descriptor reaches it.
  const std::vector<std::string> swap = testing::unnamed_files_in(dir.path());
  ASSERT_EQ(swap.size(), 1u) << "no swap file open under " << dir.path();
  std::filesystem::resize_file(swap[0], 4096);  // the header only: someone truncated it
  const absl::Status s = step();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_NE(s.message().find("reading " + dir.path() + "/zeroengine-"), std::string::npos) << s;
  EXPECT_NE(s.message().find("-rank0.optim.swp"), std::string::npos) << s;
  EXPECT_NE(s.message().find("shorter than expected"), std::string::npos) << s;
}
#endif

}  // namespace
}  // namespace zero
