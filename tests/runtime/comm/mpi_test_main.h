// main() for GoogleTest binaries that run under mpirun (mpi_test_main.cpp): it owns the
// MpiSession and one MPI transport, runs every test on every rank, prints each failed
// assertion tagged with its rank on every rank (only rank 0 keeps the full gtest report),
// and exits with the largest exit code over all ranks.
//
// Tests must keep ranks in lock-step: decide to skip identically on every rank, and use
// EXPECT_* (not ASSERT_*) before a collective so a failing rank does not skip it.
#pragma once

#include "runtime/comm/transport.h"

namespace moert::comm::testing {

// The MPI transport of this process; valid while tests run.
Transport& mpi_test_transport();

}  // namespace moert::comm::testing
