// MPI transport over host buffers, and the RAII owner of MPI itself.
//
// Lifetime: create one MpiSession at the top of main (before any Transport), make the
// transports, and destroy every transport before the session (its destructor calls
// MPI_Finalize). Threading is MPI_THREAD_FUNNELED: only the thread that created the
// session may call the transport.
//
// This header names no MPI type; mpi_transport.cpp is the only file that includes <mpi.h>.
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/transport.h"
#include "core/status.h"

namespace moert::comm {

class MpiSession {
 public:
  // Calls MPI_Init_thread (MPI_THREAD_FUNNELED) unless MPI is already initialized, then
  // set_process_identity() with the MPI rank, size and host, so log lines and MOERT_CHECK
  // name the rank. argc/argv may be null. Failing to initialize is fatal (MOERT_CHECK).
  MpiSession(int* argc, char*** argv);
  // MPI_Finalize, if this session initialized MPI and it is not finalized yet.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::string& host() const { return host_; }

 private:
  bool owns_mpi_ = false;
  int rank_ = 0;
  int world_size_ = 1;
  std::string host_;
};

// A Transport over a private duplicate of MPI_COMM_WORLD whose error handler is
// MPI_ERRORS_RETURN, so library failures come back as Statuses. Needs a live MpiSession
// (MOERT_CHECK). Each per-peer byte count of an all-to-all, and the byte sizes of gather and
// gatherv, must fit in int (MOERT_CHECK); broadcast and all_reduce have no such limit.
Result<std::unique_ptr<Transport>> make_mpi_transport();

// True in builds with MPI (MOERT_WITH_MPI); without it MpiSession and make_mpi_transport
// refuse with a message naming the build option (mpi_unavailable.cpp).
bool mpi_built();

// True when this process was started by an MPI launcher (mpirun/mpiexec of Open MPI, or
// srun --mpi=pmix / PMI), judged from the environment the launcher sets
// (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK). Reads no MPI state.
bool launched_by_mpi();
// Ranks of this job on this node, from the launcher's environment (Open MPI, MPICH / PMI,
// Slurm); 1 when not launched by one.
int local_rank_count();
// This process's rank among the ranks of its node (Open MPI, MPICH/Hydra, Slurm); 0 when
// not launched by one of them.
int local_rank();

}  // namespace moert::comm
