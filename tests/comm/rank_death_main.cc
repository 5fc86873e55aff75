// A job whose rank 1 dies (SIGKILL) in the middle of a run of all-reduces:
// driven by rank_death_test.cc, which checks that the survivors stop within a
// bounded time and that the output names the collective and the dead rank.
#include <signal.h>

#include <cstdio>
#include <vector>

#include "comm/communicator.h"

int main() {
  auto comm = zero::create_communicator();
  if (!comm.ok()) return 1;
  std::vector<float> buf(1 << 18, 1.0f);
  for (int i = 0; i < 1000; ++i) {
    if (i == 20 && (*comm)->rank() == 1) raise(SIGKILL);
    absl::Status s = (*comm)->all_reduce(buf.data(), static_cast<int64_t>(buf.size()), zero::DType::kF32,
                                         zero::ReduceOp::kSum);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", (*comm)->rank(), std::string(s.message()).c_str());
      return 1;
    }
    std::fill(buf.begin(), buf.end(), 1.0f);
  }
  std::printf("rank %d finished (unexpected)\n", (*comm)->rank());
  return 0;
}
