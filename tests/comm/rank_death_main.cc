// A job whose rank 1 stops taking part in the middle of a run of collectives:
// driven by rank_death_test.cc, which checks that the survivors stop within a
// bounded time and that the output names the collective and the dead rank.
//
//   rank_death_main [OP [HOW]]
//   OP:  all_reduce (the default), all_to_all or all_to_all_v, each over a
//        1 MiB fp32 buffer (on 2 or 4 ranks); or early_recv (2 ranks): each
//        rank posts a 1 MiB receive from the other at once; rank 1 sends
//        and then waits on its receive, rank 0 waits on its receive and
//        then sends (so when rank 1 stops, rank 0 is waiting on the receive
//        it posted early);
//   HOW: die (the default: rank 1 SIGKILLs itself, and the launcher ends
//        the survivors) or freeze (rank 1 stays alive but never issues the
//        collective: the survivors' waits time out after ZE_COMM_TIMEOUT_S=3).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/communicator.h"

int main(int argc, char** argv) {
  const std::string op = argc > 1 ? argv[1] : "all_reduce";
  const std::string how = argc > 2 ? argv[2] : "die";
  if (op != "all_reduce" && op != "all_to_all" && op != "all_to_all_v" && op != "early_recv") return 2;
  if (how != "die" && how != "freeze") return 2;
  if (how == "freeze") setenv("ZE_COMM_TIMEOUT_S", "3", 1);
  auto comm = zero::create_communicator();
  if (!comm.ok()) return 1;
  zero::Communicator& c = **comm;
  const int64_t n = 1 << 18, block = n / c.world_size();
  std::vector<float> buf(n, 1.0f), recv(n);
  const std::vector<int64_t> counts(c.world_size(), block);
  std::vector<int64_t> displs(c.world_size());
  for (int q = 0; q < c.world_size(); ++q) displs[q] = q * block;
  for (int i = 0; i < 1000; ++i) {
    if (i == 20 && c.rank() == 1) {
      if (how == "die") raise(SIGKILL);
      sleep(100);  // frozen: the launcher ends it once the others have failed
    }
    absl::Status s;
    if (op == "early_recv") {
      const int peer = 1 - c.rank();
      zero::CommHandle early = c.recv_async(recv.data(), n, zero::DType::kF32, peer);
      if (c.rank() == 1) s = c.send_async(buf.data(), n, zero::DType::kF32, peer)->wait();
      if (s.ok()) s = early->wait();
      if (s.ok() && c.rank() == 0) s = c.send_async(buf.data(), n, zero::DType::kF32, peer)->wait();
    } else if (op == "all_reduce") {
      s = c.all_reduce(buf.data(), n, zero::DType::kF32, zero::ReduceOp::kSum);
    } else if (op == "all_to_all") {
      s = c.all_to_all(buf.data(), recv.data(), block, zero::DType::kF32);
    } else {
      s = c.all_to_all_v(buf.data(), counts, displs, recv.data(), counts, displs, zero::DType::kF32);
    }
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", c.rank(), std::string(s.message()).c_str());
      std::fflush(stderr);
      // The communication thread may still be inside the collective: end
      // here rather than unwind (as zero-train's timeout handler does).
      std::_Exit(1);
    }
    std::fill(buf.begin(), buf.end(), 1.0f);
  }
  std::printf("rank %d finished (unexpected)\n", c.rank());
  return 0;
}
