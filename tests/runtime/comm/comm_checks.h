// Checks of the Transport contract that every host-buffer implementation must pass; the
// loopback test runs them on threads, the MPI test under mpirun. Each check is collective
// (every rank calls it) and uses EXPECT_* only, so a failing rank still makes the same
// transport calls as its peers and the job does not hang.
#pragma once

#include <cstdint>

#include "runtime/comm/transport.h"

namespace moert::comm::testing {

// The all-to-all payload: one uint64 per element, encoding who sent it to whom.
uint64_t encode_element(int src, int dst, int64_t index);
// Elements rank `src` sends to rank `dst` in exchange `seed` (0 for some pairs).
int64_t num_elements(int src, int dst, int seed);

void check_identity_and_barrier(Transport& transport);
void check_all_reduce(Transport& transport);
void check_broadcast(Transport& transport);
void check_gather(Transport& transport);
void check_gatherv(Transport& transport);
// Counts through all_to_all_counts, then payloads through start_all_to_all_v; every
// element is checked at its destination.
void check_all_to_all_payloads(Transport& transport, int seed);
// Byte-sized payloads with odd lengths (offsets not multiples of 8).
void check_all_to_all_odd_bytes(Transport& transport);
// All-zero exchange with null buffers, and exchanges where only some pairs are empty.
void check_zero_size_exchanges(Transport& transport);
// start, compute, wait; and two exchanges in flight at once, waited in reverse order.
void check_overlap(Transport& transport);

// All of the above.
void check_everything(Transport& transport);

}  // namespace moert::comm::testing
