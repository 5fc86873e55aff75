// main() of the multi-rank tests; see mpi_test_main.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "tests/testing/mpi_test_main.h"

namespace zero::testing {

namespace {
std::unique_ptr<Communicator> g_world;
}

Communicator& world() { return *g_world; }

}  // namespace zero::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A collective that waits longer than this means a peer is gone: fail, don't hang.
  setenv("ZE_COMM_TIMEOUT_S", "120", 0);
  absl::StatusOr<std::unique_ptr<zero::Communicator>> comm = zero::create_communicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "cannot start the communicator: %s\n", std::string(comm.status().message()).c_str());
    return 1;
  }
  zero::testing::g_world = std::move(comm).value();
  const int rc = RUN_ALL_TESTS();
  zero::testing::g_world.reset();
  return rc;
}
