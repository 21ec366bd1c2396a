// The world of one: a Transport for a job of a single rank that was not started by an MPI
// launcher. Every collective is a local copy (or nothing), so code written for N ranks
// runs unchanged on one without MPI_Init.
#pragma once

#include <memory>

#include "runtime/comm/transport.h"

namespace moert::comm {

// rank() == 0, world_size() == 1, host memory. abort() writes the message to stderr and
// ends the process with `code` (std::_Exit: like MPI_Abort, no destructors run).
std::unique_ptr<Transport> make_self_transport();

}  // namespace moert::comm
