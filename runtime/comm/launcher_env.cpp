// launched_by_mpi(): the launcher's environment, shared by builds with and without MPI.
#include <cstdlib>

#include "runtime/comm/mpi_transport.h"

namespace moert::comm {

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

int local_rank_count() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* text = std::getenv(name)) {
      const int value = std::atoi(text);
      if (value > 0) return value;
    }
  }
  return 1;
}

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* text = std::getenv(name)) {
      const int value = std::atoi(text);
      if (value >= 0) return value;
    }
  }
  return 0;
}

}  // namespace moert::comm
