// Loopback transport: N ranks on N threads of this process, with the synchronisation of
// a real job (a barrier waits for every rank, an all-to-all completes only once every
// peer has started it), so multi-rank logic is unit-testable without mpirun.
//
// Every operation copies its input into shared state when it is called and copies its
// output out once every rank has arrived, so in-place calls and send buffers reused right
// after start_all_to_all_v are both safe. The loopback checks what a real library cannot
// see cheaply: every rank's n-th operation must be the same kind with the same root,
// element count, type and op, and recv_bytes_per_rank[r] must equal what rank r sends.
//
// Failure never hangs: when a rank calls abort(), throws, breaks a precondition, or
// returns from `fn` while a peer still waits for it, every pending and later operation of
// the other ranks returns a non-ok Status, and run_loopback returns the first failure.
#pragma once

#include <functional>

#include "runtime/comm/transport.h"
#include "core/status.h"

namespace moert::comm {

// Runs fn(transport) on num_ranks threads (rank r gets a Transport with rank() == r) and
// returns once all have returned. Ok if every rank returned normally and no operation
// failed because of a peer; otherwise the first failure in time, its message naming the
// rank ("rank 1 aborted with code 3: ..."; "rank 2 threw: ..."). An exception thrown by
// fn is caught and reported this way, never rethrown on the caller's thread.
// Precondition: num_ranks >= 1 (else invalid_argument). fn must not keep the Transport
// or a PendingExchange beyond its return.
Status run_loopback(int num_ranks, const std::function<void(Transport&)>& fn);

}  // namespace moert::comm
