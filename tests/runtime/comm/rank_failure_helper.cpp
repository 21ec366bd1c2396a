// Helper job for the rank-failure tests: the last rank fails in the way argv[1] names
// while every other rank waits in a collective the failing rank never joins. The job must
// end quickly with a non-zero exit code and a message naming the failing rank; without
// the teardown it would hang (the test runs it under `timeout`).
//   abort  transport.abort(3, ...)           -> our line "[moert r<rank>@host error] ..."
//   throw  an uncaught exception             -> mpirun: "process rank <rank> ... signal 6"
//   check  a failing MOERT_CHECK             -> "[moert r<rank>@host] CHECK failed ..."
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "runtime/comm/mpi_transport.h"
#include "core/check.h"

int main(int argc, char** argv) {
  moert::comm::MpiSession session(&argc, &argv);
  auto transport = moert::comm::make_mpi_transport();
  if (!transport.is_ok()) {
    std::fprintf(stderr, "make_mpi_transport: %s\n", transport.status().to_string().c_str());
    return 1;
  }
  moert::comm::Transport& comm = **transport;
  const std::string mode = argc > 1 ? argv[1] : "abort";
  if (!comm.barrier().is_ok()) return 1;

  const int failing_rank = comm.world_size() - 1;
  if (comm.rank() == failing_rank) {
    if (mode == "abort") comm.abort(3, "the failing rank gives up on purpose");
    if (mode == "throw") throw std::runtime_error("deliberate failure");
    if (mode == "check") MOERT_CHECK(mode != "check", "deliberate check failure");
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    comm.abort(2, "unknown mode");
  }
  // Blocks until the job is torn down.
  moert::Status status = comm.barrier();
  std::fprintf(stderr, "rank %d: barrier returned %s (the job was not torn down)\n", comm.rank(),
               status.to_string().c_str());
  return 0;
}
