// The MPI entry points of a build without MPI (MOERT_WITH_MPI=OFF, e.g. the aarch64 cross
// build): every use is refused with a message naming the option; single-rank runs use the
// self transport and never get here.
#include "core/check.h"
#include "runtime/comm/mpi_transport.h"

namespace moert::comm {

bool mpi_built() { return false; }

MpiSession::MpiSession(int*, char***) {
  MOERT_CHECK(false, "this moert was built without MPI (MOERT_WITH_MPI=OFF)");
}

MpiSession::~MpiSession() = default;

Result<std::unique_ptr<Transport>> make_mpi_transport() {
  return unsupported("this moert was built without MPI (MOERT_WITH_MPI=OFF)");
}

}  // namespace moert::comm
