// main() for GoogleTest binaries that run under mpirun (mpi_test_main.cpp): it owns the
// MpiSession and one MPI transport, runs every test on every rank, prints each failed
// assertion tagged with its rank on every rank (only rank 0 keeps the full gtest report),
// and exits with the largest exit code over all ranks.
//
// Tests must keep ranks in lock-step: decide to skip identically on every rank, and use
// EXPECT_* (not ASSERT_*) before a collective so a failing rank does not skip it.
//
// Whether a binary can run on this machine (enough GPUs, say) is decided before any case runs,
// by its run gate, never by a case's GTEST_SKIP: ctest would have to find a skip in the output
// (SKIP_REGULAR_EXPRESSION), which reports the whole binary skipped even when other cases
// failed beside it.
#pragma once

#include <functional>
#include <string>

#include "runtime/comm/transport.h"

namespace moert::comm::testing {

// The MPI transport of this process; valid while tests run.
Transport& mpi_test_transport();

// kRun: every case runs. kSkip: only the cases of `filter` (a --gtest_filter pattern; none
// when empty) run, and the binary exits 77 (ctest's SKIP_RETURN_CODE) when they pass, 1 when
// one fails. kFail: exit 1 before any case runs. `reason` is printed by rank 0.
struct RunGate {
  enum Decision { kRun = 0, kSkip = 1, kFail = 2 };
  Decision decision = kRun;
  std::string reason;
  std::string filter;
};

// Installs this binary's gate (at most one, from a static initializer of the test file).
// main() calls it on every rank once the MPI transport exists and keeps the strictest
// decision over all ranks, so every rank does the same; rank 0 prints its reason. A skip's
// filter must name the same cases on every rank, and they must not call collectives.
bool set_run_gate(std::function<RunGate(Transport& bootstrap)> gate);

}  // namespace moert::comm::testing
