// Transport: the collectives that move bytes between the ranks of one job.
//
// One interface, three implementations chosen once by a factory:
//   * loopback.h       N ranks on threads of one process (unit tests, no mpirun);
//   * mpi_transport.h  MPI over host buffers (Open MPI: vader/tcp or UCX underneath);
//   * nccl_transport.h NCCL over device buffers (only built when MOERT_HAVE_NCCL).
// This header names no MPI, NCCL or CUDA type.
//
// Terms
//   rank        index of this process (or loopback thread) in [0, world_size).
//   root        the rank that sends (broadcast) or receives (gather) everything.
//   byte counts `send_bytes_per_rank[r]` is what this rank sends to rank r;
//               `recv_bytes_per_rank[r]` what it receives from rank r. Both have exactly
//               world_size entries, all >= 0, and recv_bytes_per_rank[r] on rank q must
//               equal send_bytes_per_rank[q] on rank r.
//   offsets     segments are packed back to back in rank order: the segment for rank r
//               starts at byte cu_bytes[r] = sum of bytes for ranks 0..r-1 (the exclusive
//               prefix sum, see exclusive_prefix_sum), so a buffer holds cu_bytes[N] bytes.
//
// Rules shared by every implementation
//   * Collective: every rank calls the same operations in the same order with matching
//     arguments (root, element count, op); the non-blocking start_all_to_all_v counts
//     at its start, not at its wait.
//   * Buffers live in buffer_location() memory (host for loopback and MPI, device for
//     NCCL) unless a method says otherwise.
//   * Failures of the communication itself (a peer died, the library reported an error)
//     come back as a non-ok Status. A call that breaks a precondition it can see locally
//     (a vector of the wrong size, a negative count, a bad root) never leaves peers
//     hanging: MPI and NCCL stop the job through MOERT_CHECK, the loopback returns
//     invalid_argument and fails the peers' operations too. The loopback also checks
//     what only peers can see (mismatched counts, roots, sizes, op kinds).
//   * A Transport is used by one thread at a time (MPI is initialized FUNNELED: the thread
//     that created the MpiSession).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace moert::comm {

enum class ReduceOp { kSum, kMax };
enum class BufferLocation { kHost, kDevice };

const char* reduce_op_name(ReduceOp op);

// A started all-to-all. wait() blocks until this rank's receive buffer is filled and its
// send buffer may be reused, and returns the outcome; call it exactly once (a second call
// returns the same Status). Destroying a PendingExchange without wait() waits (and drops
// the Status), because the library may still be reading and writing the buffers.
class PendingExchange {
 public:
  virtual ~PendingExchange() = default;
  virtual Status wait() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual BufferLocation buffer_location() const = 0;

  // Returns once every rank has entered barrier().
  virtual Status barrier() = 0;

  // In place: data[i] becomes op over all ranks' data[i]. The sum is taken in rank order
  // on the loopback (bitwise identical on every rank); MPI and NCCL use their own order.
  // `count` is in elements and must match on every rank.
  virtual Status all_reduce(int64_t* data, size_t count, ReduceOp op) = 0;
  virtual Status all_reduce(double* data, size_t count, ReduceOp op) = 0;
  virtual Status all_reduce(float* data, size_t count, ReduceOp op) = 0;

  // Copies `bytes` bytes from root's `data` into every other rank's `data`.
  virtual Status broadcast(void* data, size_t bytes, int root) = 0;

  // Every rank sends `bytes` bytes; at root, recv (world_size * bytes) holds rank r's
  // bytes at offset r * bytes. recv is ignored (may be null) on the other ranks.
  virtual Status gather(const void* send, size_t bytes, void* recv, int root) = 0;

  // Every rank sends a blob of its own size (0 allowed). At root the result holds
  // world_size blobs in rank order; on the other ranks it is empty. Host memory on every
  // implementation (NCCL routes it through its bootstrap transport).
  virtual Result<std::vector<std::vector<uint8_t>>> gatherv(const void* send, size_t bytes,
                                                            int root) = 0;

  // Starts the variable all-to-all and returns at once, so that compute can overlap the
  // exchange. send holds cu_send[N] bytes: the segment at cu_send[r] goes to rank r; recv
  // receives rank r's segment at cu_recv[r] (offsets: exclusive prefix sums of the byte
  // counts, see the legend above). Zero-byte segments and all-zero exchanges are allowed.
  // The buffers and both vectors' contents must stay valid and untouched until wait()
  // returns. Never returns null: a failure to start is reported by wait().
  virtual std::unique_ptr<PendingExchange> start_all_to_all_v(
      const void* send, const std::vector<int64_t>& send_bytes_per_rank, void* recv,
      const std::vector<int64_t>& recv_bytes_per_rank) = 0;

  // Blocking exchange of one int64 per peer in host memory: result[r] is what rank r put
  // in send_counts[this rank]. The usual first step before start_all_to_all_v (each rank
  // tells each peer how many bytes or tokens to expect). send_counts has world_size entries.
  virtual Result<std::vector<int64_t>> all_to_all_counts(const std::vector<int64_t>& send_counts);

  // Tears the whole job down so that no rank hangs: logs `message` with this rank and
  // host, then ends every rank with exit code `code` (MPI_Abort). The loopback fails
  // every peer's pending and future operations instead, and unwinds this thread.
  [[noreturn]] virtual void abort(int code, const std::string& message) = 0;
};

// cu[r] = sum of counts[0..r-1]; cu has counts.size() + 1 entries (cu.back() = total).
std::vector<int64_t> exclusive_prefix_sum(const std::vector<int64_t>& counts);

// invalid_argument unless `counts` has `world_size` entries, all >= 0. `what` names the
// vector in the message ("send_bytes_per_rank[2] = -1 must be >= 0").
Status validate_counts(const std::vector<int64_t>& counts, int world_size, const char* what);

// invalid_argument unless 0 <= root < world_size.
Status validate_root(int root, int world_size);

// A PendingExchange that is already finished with `status` (failures to start, and
// implementations whose exchange completes inside start).
std::unique_ptr<PendingExchange> finished_exchange(Status status);

}  // namespace moert::comm
