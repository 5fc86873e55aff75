// A rank that joins the MPI job and then never takes part in a collective:
// the peer of zero_train_setup_signal_test.cc, whose zero-train rank then
// waits in set-up for ever (as behind a rank stuck loading a checkpoint).
#include <chrono>
#include <thread>

#include "comm/communicator.h"

int main() {
  auto comm = zero::create_communicator();
  if (!comm.ok()) return 1;
  std::this_thread::sleep_for(std::chrono::seconds(120));
  return 0;
}
