// The only file of moert that includes <mpi.h>.
#include "runtime/comm/mpi_transport.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/log.h"

namespace moert::comm {
namespace {

// Largest piece handed to one MPI call whose count is an int.
constexpr size_t kMaxChunkElements = size_t{1} << 30;

// MPI may reject null buffers even for zero counts; zero-byte calls point here instead.
uint8_t g_empty_buffer[1];

const void* or_empty(const void* data) { return data != nullptr ? data : g_empty_buffer; }
void* or_empty(void* data) { return data != nullptr ? data : g_empty_buffer; }

Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) {
    std::snprintf(text, sizeof(text), "MPI error %d", rc);
  }
  return internal_error(std::string(what) + " failed on rank " +
                        std::to_string(process_identity().rank) + ": " + text);
}

bool mpi_live() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

int to_int(int64_t value, const char* what) {
  MOERT_CHECK(value >= 0 && value <= INT_MAX, "" <<
              what << " = " << value << " does not fit the int count of an MPI call");
  return static_cast<int>(value);
}

MPI_Op to_mpi(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<int64_t>() { return MPI_INT64_T; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }

// The variable all-to-all as point-to-point messages: one MPI_Irecv and one MPI_Isend
// per peer with a non-empty segment, and a local copy for this rank's own segment. (Open
// MPI 4.1's MPI_Ialltoallv deadlocked in oversubscribed 4-rank runs of `moert run`, with
// every rank inside MPI_Wait of the same exchange; plain messages have no such issue.)
// Exchanges never get confused with each other: MPI keeps messages between two ranks on
// one communicator and tag in order, and every rank starts its exchanges in the same order.
constexpr int kAllToAllTag = 0x6d6f;

class MpiExchange final : public PendingExchange {
 public:
  ~MpiExchange() override {
    if (!done_ && mpi_live()) (void)wait();
  }

  Status start(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
               const std::vector<int64_t>& recv_bytes, int rank, MPI_Comm comm) {
    const std::vector<int64_t> cu_send = exclusive_prefix_sum(send_bytes);
    const std::vector<int64_t> cu_recv = exclusive_prefix_sum(recv_bytes);
    const auto* send_ptr = static_cast<const uint8_t*>(send);
    auto* recv_ptr = static_cast<uint8_t*>(recv);
    const int world = static_cast<int>(send_bytes.size());
    requests_.reserve(2 * static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      if (r == rank || recv_bytes[r] == 0) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      Status status = mpi_status(MPI_Irecv(recv_ptr + cu_recv[r], to_int(recv_bytes[r], "recv_bytes_per_rank[r]"),
                                           MPI_BYTE, r, kAllToAllTag, comm, &request),
                                 "MPI_Irecv(all_to_all_v)");
      if (!status.is_ok()) return fail_start(status);
      requests_.push_back(request);
    }
    for (int r = 0; r < world; ++r) {
      if (r == rank || send_bytes[r] == 0) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      Status status = mpi_status(MPI_Isend(send_ptr + cu_send[r], to_int(send_bytes[r], "send_bytes_per_rank[r]"),
                                           MPI_BYTE, r, kAllToAllTag, comm, &request),
                                 "MPI_Isend(all_to_all_v)");
      if (!status.is_ok()) return fail_start(status);
      requests_.push_back(request);
    }
    if (send_bytes[rank] != recv_bytes[rank]) {
      return fail_start(invalid_argument("rank " + std::to_string(rank) + " sends " + std::to_string(send_bytes[rank]) +
                                         " bytes to itself but expects " + std::to_string(recv_bytes[rank])));
    }
    if (send_bytes[rank] > 0) {
      std::memmove(recv_ptr + cu_recv[rank], send_ptr + cu_send[rank], static_cast<size_t>(send_bytes[rank]));
    }
    return Status::ok();
  }

  Status wait() override {
    if (done_) return status_;
    done_ = true;
    if (!requests_.empty()) {
      const Status waited = mpi_status(
          MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall(all_to_all_v)");
      if (status_.is_ok()) status_ = waited;  // a failure to start wins
    }
    return status_;
  }

 private:
  // Keeps the requests already posted: wait() still completes them before reporting.
  Status fail_start(const Status& status) {
    if (status_.is_ok()) status_ = status;
    return status;
  }

  std::vector<MPI_Request> requests_;
  bool done_ = false;
  Status status_;
};

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, int rank, int world_size)
      : comm_(comm), rank_(rank), world_size_(world_size) {}
  ~MpiTransport() override {
    if (mpi_live()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  BufferLocation buffer_location() const override { return BufferLocation::kHost; }

  Status barrier() override { return mpi_status(MPI_Barrier(comm_), "MPI_Barrier"); }

  Status all_reduce(int64_t* data, size_t count, ReduceOp op) override {
    return all_reduce_impl(data, count, op);
  }
  Status all_reduce(double* data, size_t count, ReduceOp op) override {
    return all_reduce_impl(data, count, op);
  }
  Status all_reduce(float* data, size_t count, ReduceOp op) override {
    return all_reduce_impl(data, count, op);
  }

  Status broadcast(void* data, size_t bytes, int root) override {
    check_root(root);
    auto* bytes_ptr = static_cast<uint8_t*>(data);
    for (size_t done = 0; done < bytes;) {
      const size_t chunk = std::min(bytes - done, kMaxChunkElements);
      MOERT_RETURN_IF_ERROR(mpi_status(
          MPI_Bcast(bytes_ptr + done, static_cast<int>(chunk), MPI_BYTE, root, comm_),
          "MPI_Bcast"));
      done += chunk;
    }
    return Status::ok();
  }

  Status gather(const void* send, size_t bytes, void* recv, int root) override {
    check_root(root);
    const int count = to_int(static_cast<int64_t>(bytes), "gather bytes");
    to_int(static_cast<int64_t>(bytes) * world_size_, "gather bytes * world_size");
    return mpi_status(MPI_Gather(or_empty(send), count, MPI_BYTE,
                                 rank_ == root ? or_empty(recv) : nullptr, count, MPI_BYTE, root,
                                 comm_),
                      "MPI_Gather");
  }

  Result<std::vector<std::vector<uint8_t>>> gatherv(const void* send, size_t bytes,
                                                    int root) override {
    check_root(root);
    // Every rank learns every size, so every rank takes the same decision below.
    std::vector<int64_t> sizes(static_cast<size_t>(world_size_), 0);
    const auto my_size = static_cast<int64_t>(bytes);
    MOERT_RETURN_IF_ERROR(mpi_status(
        MPI_Allgather(&my_size, 1, MPI_INT64_T, sizes.data(), 1, MPI_INT64_T, comm_),
        "MPI_Allgather(gatherv sizes)"));
    const std::vector<int64_t> cu_sizes = exclusive_prefix_sum(sizes);
    to_int(cu_sizes.back(), "gatherv total bytes");
    std::vector<int> counts(sizes.size()), displs(sizes.size());
    for (size_t r = 0; r < sizes.size(); ++r) {
      counts[r] = static_cast<int>(sizes[r]);
      displs[r] = static_cast<int>(cu_sizes[r]);
    }
    std::vector<uint8_t> packed(rank_ == root ? static_cast<size_t>(cu_sizes.back()) : 0);
    MOERT_RETURN_IF_ERROR(mpi_status(
        MPI_Gatherv(or_empty(send), static_cast<int>(bytes), MPI_BYTE, or_empty(packed.data()),
                    counts.data(), displs.data(), MPI_BYTE, root, comm_),
        "MPI_Gatherv"));
    std::vector<std::vector<uint8_t>> blobs;
    if (rank_ == root) {
      blobs.reserve(sizes.size());
      for (size_t r = 0; r < sizes.size(); ++r) {
        blobs.emplace_back(packed.begin() + cu_sizes[r], packed.begin() + cu_sizes[r + 1]);
      }
    }
    return blobs;
  }

  std::unique_ptr<PendingExchange> start_all_to_all_v(
      const void* send, const std::vector<int64_t>& send_bytes_per_rank, void* recv,
      const std::vector<int64_t>& recv_bytes_per_rank) override {
    Status send_valid = validate_counts(send_bytes_per_rank, world_size_, "send_bytes_per_rank");
    MOERT_CHECK(send_valid.is_ok(), "" << send_valid.message());
    Status recv_valid = validate_counts(recv_bytes_per_rank, world_size_, "recv_bytes_per_rank");
    MOERT_CHECK(recv_valid.is_ok(), "" << recv_valid.message());
    auto exchange = std::make_unique<MpiExchange>();
    (void)exchange->start(send, send_bytes_per_rank, recv, recv_bytes_per_rank, rank_, comm_);  // reported by wait()
    return exchange;
  }

  [[noreturn]] void abort(int code, const std::string& message) override {
    const ProcessIdentity& who = process_identity();
    const std::string line = "[moert r" + std::to_string(rank_) + "@" + who.host +
                             " error] aborting the job with code " + std::to_string(code) +
                             ": " + message + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code != 0 ? code : 1);  // MPI_Abort does not return; this keeps [[noreturn]]
  }

 private:
  template <typename T>
  Status all_reduce_impl(T* data, size_t count, ReduceOp op) {
    for (size_t done = 0; done < count;) {
      const size_t chunk = std::min(count - done, kMaxChunkElements);
      MOERT_RETURN_IF_ERROR(mpi_status(MPI_Allreduce(MPI_IN_PLACE, data + done,
                                                     static_cast<int>(chunk), mpi_type<T>(),
                                                     to_mpi(op), comm_),
                                       "MPI_Allreduce"));
      done += chunk;
    }
    return Status::ok();
  }

  void check_root(int root) const {
    Status status = validate_root(root, world_size_);
    MOERT_CHECK(status.is_ok(), "" << status.message());
  }


  MPI_Comm comm_;
  int rank_;
  int world_size_;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MOERT_CHECK(MPI_Initialized(&initialized) == MPI_SUCCESS, "MPI_Initialized failed");
  if (initialized == 0) {
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    MOERT_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread returned " << rc);
    MOERT_CHECK(provided >= MPI_THREAD_FUNNELED,
                "MPI_Init_thread provides thread level " << provided << ", need FUNNELED");
    owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int length = 0;
  if (MPI_Get_processor_name(name, &length) == MPI_SUCCESS) host_.assign(name, length);
  if (host_.empty()) host_ = identity_from_environment().host;
  set_process_identity(ProcessIdentity{rank_, world_size_, host_});
}

MpiSession::~MpiSession() {
  if (owns_mpi_ && mpi_live()) MPI_Finalize();
}

bool mpi_built() { return true; }

Result<std::unique_ptr<Transport>> make_mpi_transport() {
  MOERT_CHECK(mpi_live(), "make_mpi_transport needs a live MpiSession");
  MPI_Comm comm = MPI_COMM_NULL;
  MOERT_RETURN_IF_ERROR(mpi_status(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup"));
  Status status =
      mpi_status(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (!status.is_ok()) {
    MPI_Comm_free(&comm);
    return status;
  }
  int rank = 0;
  int world_size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world_size);
  return std::unique_ptr<Transport>(std::make_unique<MpiTransport>(comm, rank, world_size));
}

}  // namespace moert::comm
