// The communication log (comm/comm_log.h) on 1-4 ranks: after a run of
// collectives the rows name each op with DeepSpeed's message size and the
// right count, latencies add up and exclude queueing, busbw is algbw times
// nccl-tests' factor for the communicator's size, prof_ops filters, unknown
// op names are rejected by name, verbose prints one line per op, groups made
// by split() record into the same log with their own size, and the summary
// table has a header and one line per (op, size). An all-to-all records the
// whole input (count x ranks), an all-to-all-v this rank's send parts, both
// with busbw = algbw x (n-1)/n as DeepSpeed's comms logger.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <sstream>

#include "comm/comm_log.h"
#include "tests/testing/mpi_test_main.h"

namespace zero {
namespace {

using testing::world;

// world() is shared by every test: attach a log for one test only.
class Attach {
 public:
  Attach(Communicator& c, CommLog* log, std::string group = {}) : c_(c) { c_.set_log(log, std::move(group)); }
  ~Attach() { c_.set_log(nullptr); }

 private:
  Communicator& c_;
};

// nccl-tests' factors, written out independently of comm_bus_factor.
double expected_factor(CommOp op, int n) {
  switch (op) {
    case CommOp::kAllReduce:
    case CommOp::kAllReduceScalars: return 2.0 * (n - 1) / n;
    case CommOp::kAllGather:
    case CommOp::kReduceScatter:
    case CommOp::kAllToAll:
    case CommOp::kAllToAllV: return static_cast<double>(n - 1) / n;
    case CommOp::kBarrier: return 0.0;
    default: return 1.0;
  }
}

struct Expected {
  std::string_view op;
  int64_t message_bytes;
  int64_t count;
};

void expect_rows(const std::vector<CommLogRow>& rows, const std::vector<Expected>& want) {
  ASSERT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(comm_op_name(rows[i].op), want[i].op) << "row " << i;
    EXPECT_EQ(rows[i].message_bytes, want[i].message_bytes) << want[i].op;
    EXPECT_EQ(rows[i].count, want[i].count) << want[i].op;
  }
}

void expect_consistent(const CommLogRow& r) {
  EXPECT_GE(r.total_ms, 0.0);
  EXPECT_NEAR(r.total_ms, r.avg_ms() * static_cast<double>(r.count), 1e-9 * r.total_ms);
  if (r.avg_ms() > 0) {
    EXPECT_NEAR(r.algbw_gbps(), static_cast<double>(r.message_bytes) / (r.avg_ms() / 1e3) / 1e9,
                1e-9 * r.algbw_gbps());
  }
  EXPECT_NEAR(r.busbw_gbps(), r.algbw_gbps() * expected_factor(r.op, r.world_size), 1e-9 * r.algbw_gbps())
      << comm_op_name(r.op) << " on " << r.world_size;
}

TEST(CommLogTest, RecordsEveryCollectiveWithDeepSpeedsMessageSize) {
  const int w = world().world_size(), rank = world().rank();
  CommLog log;
  {
    Attach attach(world(), &log);
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(world().all_reduce(v.data(), 1000, DType::kF32, ReduceOp::kSum).ok());
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(world().all_reduce(v.data(), 10, DType::kF32, ReduceOp::kMax).ok());
    // Strided: the message is the gathered blocks (7 x ranks), not the gaps.
    std::vector<float> gathered(static_cast<size_t>(9 * w), 0.0f);
    EXPECT_TRUE(world().all_gather(gathered.data(), 7, 9, DType::kF32).ok());
    // Rank q's part is q + 1 elements: the message is the whole input.
    std::vector<int64_t> counts(w);
    int64_t total = 0;
    for (int q = 0; q < w; ++q) total += counts[q] = q + 1;
    std::vector<uint16_t> send(static_cast<size_t>(total), 0), recv(static_cast<size_t>(counts[rank]));
    EXPECT_TRUE(world().reduce_scatter(send.data(), recv.data(), counts, DType::kBF16).ok());
    int32_t root_value[3] = {1, 2, 3};
    EXPECT_TRUE(world().broadcast(root_value, 3, DType::kI32, 0).ok());
    EXPECT_TRUE(world().barrier().ok());
    EXPECT_TRUE(world().all_reduce_sum(1.0).ok());

    const std::vector<CommLogRow> rows = log.rows();
    expect_rows(rows, {{"all_reduce", 40, 2},
                       {"all_reduce", 4000, 5},
                       {"reduce_scatter", 2 * total, 1},
                       {"all_gather", 4 * 7 * w, 1},
                       {"broadcast", 12, 1},
                       {"barrier", 0, 1},
                       {"all_reduce_scalars", 8, 1}});
    for (const CommLogRow& r : rows) {
      EXPECT_EQ(r.world_size, w);
      EXPECT_EQ(r.group, "");
      expect_consistent(r);
      if (w > 1) {
        EXPECT_GT(r.total_ms, 0.0) << comm_op_name(r.op) << ": an exchange between ranks takes time";
      }
    }
  }
  // Detached: nothing more is recorded, and reset() empties the log.
  float x = 1.0f;
  EXPECT_TRUE(world().all_reduce(&x, 1, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(log.rows().size(), 7u);
  EXPECT_EQ(world().log(), nullptr);
  log.reset();
  EXPECT_TRUE(log.rows().empty());
}

TEST(CommLogTest, AllToAllRecordsItsInputAndBusBandwidth) {
  const int w = world().world_size(), rank = world().rank();
  std::vector<std::string> lines;
  std::mutex mu;
  CommLog log({}, [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  });
  {
    Attach attach(world(), &log, "expert");
    std::vector<float> send(static_cast<size_t>(6 * w), 1.0f), recv(send.size());
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(world().all_to_all(send.data(), recv.data(), 6, DType::kF32).ok());
    // Rank r sends r + 1 int32 elements to every rank: this rank's message is
    // its own parts, (r + 1) x ranks, whatever it receives.
    std::vector<int64_t> send_counts(w, rank + 1), send_displs(w), recv_counts(w), recv_displs(w);
    int64_t received = 0;
    for (int q = 0; q < w; ++q) {
      send_displs[q] = q * (rank + 1);
      recv_counts[q] = q + 1;
      recv_displs[q] = received;
      received += q + 1;
    }
    std::vector<int32_t> send_v(static_cast<size_t>(w * (rank + 1)), 3), recv_v(static_cast<size_t>(received));
    EXPECT_TRUE(world()
                    .all_to_all_v(send_v.data(), send_counts, send_displs, recv_v.data(), recv_counts, recv_displs,
                                  DType::kI32)
                    .ok());
  }
  const std::vector<CommLogRow> rows = log.rows();
  expect_rows(rows, {{"all_to_all", 4 * 6 * w, 3}, {"all_to_all_v", 4 * (rank + 1) * w, 1}});
  for (const CommLogRow& r : rows) {
    EXPECT_EQ(r.world_size, w);
    EXPECT_EQ(r.group, "expert");
    expect_consistent(r);
    EXPECT_NEAR(r.busbw_gbps(), r.algbw_gbps() * (w - 1) / w, 1e-9 * r.algbw_gbps());
    if (w > 1) {
      EXPECT_GT(r.total_ms, 0.0) << comm_op_name(r.op);
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find("comm op: all_to_all | group: expert (" + std::to_string(w) + " ranks)"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[3].find("comm op: all_to_all_v |"), std::string::npos) << lines[3];
}

TEST(CommLogTest, LatencyExcludesTimeQueuedBehindEarlierCollectives) {
  CommLog log;
  Attach attach(world(), &log);
  std::vector<std::vector<float>> bufs(8, std::vector<float>(1 << 18, 1.0f));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CommHandle> handles;
  for (auto& b : bufs) {
    handles.push_back(world().all_reduce_async(b.data(), static_cast<int64_t>(b.size()), DType::kF32, ReduceOp::kSum));
  }
  for (const CommHandle& h : handles) EXPECT_TRUE(h->wait().ok());
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<CommLogRow> rows = log.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].count, 8);
  // They ran one after another inside the wall time; counting queueing, the
  // k-th would also include the k-1 before it and the sum would exceed it.
  EXPECT_LE(rows[0].total_ms, wall_ms);
}

TEST(CommLogTest, ProfOpsRecordsOnlyTheNamedOps) {
  absl::StatusOr<std::unique_ptr<CommLog>> log = CommLog::create({"all_gather_into_tensor", "barrier"});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_FALSE((*log)->records(CommOp::kAllReduce));
  EXPECT_TRUE((*log)->records(CommOp::kAllGather));
  Attach attach(world(), log->get());
  const int w = world().world_size();
  std::vector<float> v(16 * w, 1.0f);
  EXPECT_TRUE(world().all_reduce(v.data(), 16, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_TRUE(world().all_gather(v.data(), 16, 16, DType::kF32).ok());
  EXPECT_TRUE(world().broadcast(v.data(), 16, DType::kF32, 0).ok());
  EXPECT_TRUE(world().barrier().ok());
  EXPECT_TRUE(world().all_reduce_max(1.0).ok());
  expect_rows((*log)->rows(), {{"all_gather", 64 * w, 1}, {"barrier", 0, 1}});
}

TEST(CommLogTest, UnknownOpNameIsRejectedNamingItAndTheValidOnes) {
  absl::StatusOr<std::unique_ptr<CommLog>> log = CommLog::create({"all_reduce", "alltoall"});
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(log.status().message());
  EXPECT_NE(message.find("\"alltoall\""), std::string::npos) << message;
  for (const char* valid :
       {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "all_to_all_v", "broadcast", "send", "recv",
        "barrier"}) {
    EXPECT_NE(message.find(valid), std::string::npos) << valid << " missing from: " << message;
  }
  EXPECT_TRUE(parse_comm_ops({"all_reduce", "reduce_scatter_tensor", "isend", "irecv", "send_recv"}).ok());
  EXPECT_FALSE(parse_comm_op("").ok());
  EXPECT_EQ(parse_comm_op("all_to_all").value(), CommOp::kAllToAll);
  EXPECT_EQ(parse_comm_op("all_to_all_v").value(), CommOp::kAllToAllV);
  EXPECT_EQ(parse_comm_op("all_to_all_single").value(), CommOp::kAllToAll);  // DeepSpeed's name
  EXPECT_EQ(parse_comm_op("all_reduce_scalars").value(), CommOp::kAllReduceScalars);
}

TEST(CommLogTest, VerbosePrintsOneLinePerCompletedOp) {
  std::mutex mu;
  std::vector<std::string> lines;
  CommLog log({}, [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);  // called on the communication thread
    lines.push_back(line);
  });
  Attach attach(world(), &log, "data");
  const int w = world().world_size();
  std::vector<float> v(256 * w, 1.0f);
  EXPECT_TRUE(world().all_reduce(v.data(), 256 * w, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_TRUE(world().all_gather(v.data(), 256, 256, DType::kF32).ok());
  EXPECT_TRUE(world().barrier().ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(lines.size(), 3u);
  const char* ops[] = {"comm op: all_reduce |", "comm op: all_gather |", "comm op: barrier |"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(lines[i].find(ops[i]), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("group: data (" + std::to_string(w) + " ranks)"), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find(" ms |"), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("algbw: "), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find("busbw: "), std::string::npos) << lines[i];
    EXPECT_EQ(lines[i].find('\n'), std::string::npos) << "one line: " << lines[i];
  }
  EXPECT_NE(lines[0].find("msg size: " + std::string(w == 1 ? "1.0 KiB" : std::to_string(w) + ".0 KiB")),
            std::string::npos)
      << lines[0];
}

TEST(CommLogTest, SplitGroupsRecordIntoTheSameLogWithTheirOwnSize) {
  const int w = world().world_size(), rank = world().rank();
  CommLog log;
  Attach attach(world(), &log, "world");
  absl::StatusOr<std::unique_ptr<Communicator>> group = world().split(rank % 2, rank);
  ASSERT_TRUE(group.ok()) << group.status();
  Communicator& g = **group;
  EXPECT_EQ(g.world_size(), (w - rank % 2 + 1) / 2);
  EXPECT_EQ(g.log(), &log) << "a group inherits its parent's log";
  EXPECT_EQ(g.log_group(), "");
  std::vector<float> v(100, 1.0f);
  EXPECT_TRUE(g.all_reduce(v.data(), 100, DType::kF32, ReduceOp::kSum).ok());  // unlabelled
  g.set_log(&log, "data");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(g.all_reduce(v.data(), 100, DType::kF32, ReduceOp::kSum).ok());
  EXPECT_TRUE(world().all_reduce(v.data(), 100, DType::kF32, ReduceOp::kSum).ok());
  const std::vector<CommLogRow> rows = log.rows();
  ASSERT_EQ(rows.size(), 3u);
  // Same op and size: by group label, then size of the communicator.
  EXPECT_EQ(rows[0].group, "");
  EXPECT_EQ(rows[0].world_size, g.world_size());
  EXPECT_EQ(rows[0].count, 1);
  EXPECT_EQ(rows[1].group, "data");
  EXPECT_EQ(rows[1].world_size, g.world_size());
  EXPECT_EQ(rows[1].count, 3);
  EXPECT_EQ(rows[2].group, "world");
  EXPECT_EQ(rows[2].world_size, w);
  EXPECT_EQ(rows[2].count, 1);
  for (const CommLogRow& r : rows) {
    EXPECT_EQ(r.message_bytes, 400);
    expect_consistent(r);
  }
  g.set_log(nullptr);
  EXPECT_EQ(world().log(), &log) << "detaching a group leaves its parent's log";
}

TEST(CommLogTest, PointToPointRecordsTheBytesEachDirectionMoves) {
  const int w = world().world_size(), rank = world().rank();
  CommLog log;
  Attach attach(world(), &log);
  const int partner = rank ^ 1;  // pairs (0,1), (2,3); an odd rank out sits it out
  if (partner < w) {
    std::vector<float> out(10, 1.0f), in(20, 0.0f);
    // Each side receives what the other sends: 10 one way, 20 the other.
    const bool low = rank < partner;
    EXPECT_TRUE(world()
                    .send_recv_async(out.data(), low ? 10 : 20, in.data(), low ? 20 : 10, DType::kF32, partner)
                    ->wait()
                    .ok());
    if (low) {
      EXPECT_TRUE(world().send_async(out.data(), 5, DType::kF32, partner)->wait().ok());
    } else {
      EXPECT_TRUE(world().recv_async(in.data(), 5, DType::kF32, partner)->wait().ok());
    }
    expect_rows(log.rows(), {{low ? "send" : "recv", 20, 1}, {"send_recv", 80, 1}});
    for (const CommLogRow& r : log.rows()) expect_consistent(r);
  } else {
    // No peer: the failed send is not recorded.
    float x = 0;
    EXPECT_FALSE(world().send_async(&x, 1, DType::kF32, rank)->wait().ok());
    EXPECT_TRUE(log.rows().empty());
  }
}

// Formatting only: no communicator.
TEST(CommLogTest, SummaryHasAHeaderAndOneLinePerOpAndSize) {
  CommLog log({CommOp::kAllReduce, CommOp::kAllGather});
  for (int i = 0; i < 3; ++i) log.record(CommOp::kAllReduce, 1 << 20, 4, 0.001, "data");
  log.record(CommOp::kAllGather, 4 << 20, 4, 0.002, "data");
  log.record(CommOp::kAllReduce, 1024, 4, 0.0001, "data");
  log.record(CommOp::kBroadcast, 64, 4, 0.001);  // not profiled: ignored
  const std::string summary = log.summary();
  std::vector<std::string> lines;
  std::istringstream in(summary);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << summary;
  for (const char* column : {"Comm. Op", "Group", "Ranks", "Message Size", "Count", "Total Lat (ms)", "Avg Lat (ms)",
                             "algbw (GB/s)", "busbw (GB/s)"}) {
    EXPECT_NE(lines[0].find(column), std::string::npos) << column;
  }
  // By op, then size ascending; 1 MiB in 1 ms is 1.05 GB/s, x 2*3/4 on the bus.
  EXPECT_EQ(lines[1].rfind("all_reduce", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("1.0 KiB"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2].rfind("all_reduce", 0), 0u) << lines[2];
  for (const char* cell : {"data", "1.0 MiB", " 3 ", "3.000", "1.000", "1.05", "1.57"}) {
    EXPECT_NE(lines[2].find(cell), std::string::npos) << cell << " missing from: " << lines[2];
  }
  EXPECT_EQ(lines[3].rfind("all_gather", 0), 0u) << lines[3];
  for (const char* cell : {"4.0 MiB", "2.000", "2.10", "1.57"}) {
    EXPECT_NE(lines[3].find(cell), std::string::npos) << cell << " missing from: " << lines[3];
  }
  log.reset();
  EXPECT_NE(log.summary().find("no collectives recorded"), std::string::npos);
}

TEST(CommLogTest, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kSendRecv, 2), 1.0);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kAllToAll, 4), 0.75);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kAllToAllV, 8), 0.875);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::kAllToAll, 1), 0.0);
}

}  // namespace
}  // namespace zero
