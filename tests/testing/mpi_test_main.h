// Shared set-up of the multi-rank tests: one communicator for the whole
// process (MPI under mpirun, the local one otherwise), created before the
// tests run and finalised after. Every rank runs every test in the same
// order, so the collectives inside the tests match; tests use EXPECT (never
// ASSERT) around collectives, so a failure on one rank cannot leave the
// others waiting.
#pragma once

#include "comm/communicator.h"

namespace zero::testing {

Communicator& world();

}  // namespace zero::testing
