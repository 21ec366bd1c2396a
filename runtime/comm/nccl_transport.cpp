// The only file of moert that includes <nccl.h>. NCCL itself is opened at run time
// (dlopen of libnccl.so.2; docs/expert-parallel-gpu.md): moert starts where NCCL is not
// installed, and make_nccl_transport then fails with a Status on every rank.
#include "runtime/comm/nccl_transport.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"

namespace moert::comm {
namespace {

static_assert(std::is_same_v<cudaStream_t, CUstream_st*>,
              "nccl_transport.h passes cudaStream_t as CUstream_st*");

// The NCCL entry points moert calls (X(name, required)), resolved from libnccl.so.2 once per
// process into NcclLibrary::name; ncclGetLastError came with NCCL 2.13 and may be missing.
#define MOERT_NCCL_ENTRY_POINTS(X)                                                                            \
  X(GetUniqueId, true) X(CommInitRank, true) X(CommDestroy, true) X(CommAbort, true)                          \
  X(CommGetAsyncError, true) X(GetErrorString, true) X(GetLastError, false) X(GroupStart, true)               \
  X(GroupEnd, true) X(Send, true) X(Recv, true) X(Broadcast, true) X(AllReduce, true)

struct NcclLibrary {
#define MOERT_NCCL_MEMBER(name, required) decltype(&::nccl##name) name = nullptr;
  MOERT_NCCL_ENTRY_POINTS(MOERT_NCCL_MEMBER)
#undef MOERT_NCCL_MEMBER
  std::string error;  // why NCCL is unusable; empty once every required entry point resolved
};

const NcclLibrary& nccl() {
  static const NcclLibrary library = [] {
    NcclLibrary lib;
    void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      lib.error = std::string("cannot open libnccl.so.2: ") + (why != nullptr ? why : "unknown error");
      return lib;
    }
#define MOERT_NCCL_RESOLVE(name, required)                                                    \
  lib.name = reinterpret_cast<decltype(lib.name)>(dlsym(handle, "nccl" #name));              \
  if (lib.name == nullptr && (required) && lib.error.empty()) lib.error = "libnccl.so.2 has no nccl" #name;
    MOERT_NCCL_ENTRY_POINTS(MOERT_NCCL_RESOLVE)
#undef MOERT_NCCL_RESOLVE
    return lib;  // the handle stays open for the life of the process
  }();
  return library;
}

Status cuda_status(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::ok();
  return internal_error(std::string(what) + ": " + cudaGetErrorName(error) + " (" +
                        cudaGetErrorString(error) + ")");
}

Status nccl_status(ncclResult_t result, const char* what, ncclComm_t comm) {
  if (result == ncclSuccess) return Status::ok();
  std::string text = std::string(what) + ": " + nccl().GetErrorString(result);
  const char* last = nccl().GetLastError != nullptr ? nccl().GetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return internal_error(text);
}

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }

template <typename T>
ncclDataType_t nccl_type();
template <>
ncclDataType_t nccl_type<int64_t>() { return ncclInt64; }
template <>
ncclDataType_t nccl_type<double>() { return ncclFloat64; }
template <>
ncclDataType_t nccl_type<float>() { return ncclFloat32; }

class NcclTransport;

class NcclExchange final : public PendingExchange {
 public:
  explicit NcclExchange(NcclTransport* transport) : transport_(transport) {}
  ~NcclExchange() override {
    if (!done_) (void)wait();
  }
  Status wait() override;

 private:
  NcclTransport* transport_;
  bool done_ = false;
  Status status_;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(Transport& bootstrap, ncclComm_t comm, cudaStream_t stream, bool owns_stream)
      : bootstrap_(bootstrap), comm_(comm), stream_(stream), owns_stream_(owns_stream) {}
  ~NcclTransport() override {
    if (comm_ != nullptr) {
      (void)synchronize("~NcclTransport");
      nccl().CommDestroy(comm_);
    }
    if (owns_stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int world_size() const override { return bootstrap_.world_size(); }
  BufferLocation buffer_location() const override { return BufferLocation::kDevice; }

  Status barrier() override {
    MOERT_RETURN_IF_ERROR(synchronize("barrier"));
    return bootstrap_.barrier();
  }

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
    if (bytes == 0) return Status::ok();
    MOERT_RETURN_IF_ERROR(nccl_status(
        nccl().Broadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast", comm_));
    return synchronize("broadcast");
  }

  Status gather(const void* send, size_t bytes, void* recv, int root) override {
    check_root(root);
    if (bytes == 0) return Status::ok();
    MOERT_RETURN_IF_ERROR(nccl_status(nccl().GroupStart(), "ncclGroupStart", comm_));
    if (rank() == root) {
      for (int src = 0; src < world_size(); ++src) {
        (void)nccl().Recv(static_cast<uint8_t*>(recv) + static_cast<size_t>(src) * bytes, bytes,
                       ncclUint8, src, comm_, stream_);
      }
    }
    (void)nccl().Send(send, bytes, ncclUint8, root, comm_, stream_);
    MOERT_RETURN_IF_ERROR(nccl_status(nccl().GroupEnd(), "ncclGroupEnd(gather)", comm_));
    return synchronize("gather");
  }

  Result<std::vector<std::vector<uint8_t>>> gatherv(const void* send, size_t bytes,
                                                    int root) override {
    return bootstrap_.gatherv(send, bytes, root);
  }

  std::unique_ptr<PendingExchange> start_all_to_all_v(
      const void* send, const std::vector<int64_t>& send_bytes_per_rank, void* recv,
      const std::vector<int64_t>& recv_bytes_per_rank) override {
    Status send_valid = validate_counts(send_bytes_per_rank, world_size(), "send_bytes_per_rank");
    MOERT_CHECK(send_valid.is_ok(), "" << send_valid.message());
    Status recv_valid = validate_counts(recv_bytes_per_rank, world_size(), "recv_bytes_per_rank");
    MOERT_CHECK(recv_valid.is_ok(), "" << recv_valid.message());
    const std::vector<int64_t> cu_send = exclusive_prefix_sum(send_bytes_per_rank);
    const std::vector<int64_t> cu_recv = exclusive_prefix_sum(recv_bytes_per_rank);
    Status status = nccl_status(nccl().GroupStart(), "ncclGroupStart", comm_);
    if (!status.is_ok()) return finished_exchange(status);
    for (int peer = 0; peer < world_size(); ++peer) {
      const auto p = static_cast<size_t>(peer);
      // Errors of the calls inside a group are reported by ncclGroupEnd.
      if (send_bytes_per_rank[p] > 0) {
        (void)nccl().Send(static_cast<const uint8_t*>(send) + cu_send[p],
                       static_cast<size_t>(send_bytes_per_rank[p]), ncclUint8, peer, comm_,
                       stream_);
      }
      if (recv_bytes_per_rank[p] > 0) {
        (void)nccl().Recv(static_cast<uint8_t*>(recv) + cu_recv[p],
                       static_cast<size_t>(recv_bytes_per_rank[p]), ncclUint8, peer, comm_,
                       stream_);
      }
    }
    status = nccl_status(nccl().GroupEnd(), "ncclGroupEnd(all_to_all_v)", comm_);
    if (!status.is_ok()) return finished_exchange(status);
    return std::make_unique<NcclExchange>(this);
  }

  Result<std::vector<int64_t>> all_to_all_counts(
      const std::vector<int64_t>& send_counts) override {
    return bootstrap_.all_to_all_counts(send_counts);
  }

  [[noreturn]] void abort(int code, const std::string& message) override {
    if (comm_ != nullptr) nccl().CommAbort(comm_);
    comm_ = nullptr;
    bootstrap_.abort(code, message);
    std::abort();  // not reached: GCC does not trust [[noreturn]] on a virtual call
  }

  // Waits for everything queued on the stream. Polls instead of cudaStreamSynchronize so
  // that an asynchronous NCCL error (a peer died, a network timeout) ends the wait with a
  // Status instead of hanging; the communicator is then aborted.
  Status synchronize(const char* what) {
    if (comm_ == nullptr) {
      return internal_error(std::string(what) + ": the NCCL communicator was aborted");
    }
    for (;;) {
      const cudaError_t query = cudaStreamQuery(stream_);
      if (query == cudaSuccess) return Status::ok();
      if (query != cudaErrorNotReady) return cuda_status(query, what);
      ncclResult_t async_error = ncclSuccess;
      ncclResult_t result = nccl().CommGetAsyncError(comm_, &async_error);
      if (result != ncclSuccess) return nccl_status(result, "ncclCommGetAsyncError", comm_);
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        Status status = nccl_status(async_error, what, comm_);
        nccl().CommAbort(comm_);
        comm_ = nullptr;  // later calls fail with a Status (NCCL rejects a null comm)
        return status;
      }
      std::this_thread::yield();
    }
  }

 private:
  template <typename T>
  Status all_reduce_impl(T* data, size_t count, ReduceOp op) {
    if (count == 0) return Status::ok();
    MOERT_RETURN_IF_ERROR(nccl_status(
        nccl().AllReduce(data, data, count, nccl_type<T>(), to_nccl(op), comm_, stream_),
        "ncclAllReduce", comm_));
    return synchronize("all_reduce");
  }

  void check_root(int root) const {
    Status status = validate_root(root, world_size());
    MOERT_CHECK(status.is_ok(), "" << status.message());
  }

  Transport& bootstrap_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  bool owns_stream_;
};

Status NcclExchange::wait() {
  if (done_) return status_;
  done_ = true;
  status_ = transport_->synchronize("all_to_all_v");
  return status_;
}

// What rank 0 broadcasts before ncclCommInitRank.
struct InitMessage {
  ncclUniqueId id;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

Result<std::unique_ptr<Transport>> make_nccl_transport(Transport& bootstrap,
                                                       const NcclTransportOptions& options) {
  if (bootstrap.buffer_location() != BufferLocation::kHost) {
    return invalid_argument("make_nccl_transport: the bootstrap transport must use host buffers");
  }
  // Local setup first; its outcome is shared, so that no rank enters ncclCommInitRank
  // while another has given up.
  Status local;
  if (!nccl().error.empty()) local = unsupported(nccl().error);
  if (local.is_ok() && options.device >= 0) local = cuda_status(cudaSetDevice(options.device), "cudaSetDevice");
  cudaStream_t stream = options.stream;
  const bool owns_stream = stream == nullptr;
  if (local.is_ok() && owns_stream) {
    local = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                        "cudaStreamCreateWithFlags");
  }
  InitMessage message;
  std::memset(&message, 0, sizeof(message));
  if (local.is_ok() && bootstrap.rank() == 0) {
    local = nccl_status(nccl().GetUniqueId(&message.id), "ncclGetUniqueId", nullptr);
  }
  int64_t any_failed = local.is_ok() ? 0 : 1;
  Status shared = bootstrap.all_reduce(&any_failed, 1, ReduceOp::kMax);
  if (shared.is_ok()) shared = bootstrap.broadcast(&message, sizeof(message), 0);
  if (shared.is_ok() && any_failed != 0) {
    shared = local.is_ok() ? internal_error("make_nccl_transport failed on another rank")
                           : local.with_context("make_nccl_transport on rank " +
                                                std::to_string(bootstrap.rank()));
  }
  if (!shared.is_ok()) {
    if (owns_stream && stream != nullptr) cudaStreamDestroy(stream);
    return shared;
  }
  ncclComm_t comm = nullptr;
  Status init = nccl_status(
      nccl().CommInitRank(&comm, bootstrap.world_size(), message.id, bootstrap.rank()),
      "ncclCommInitRank", nullptr);
  if (!init.is_ok()) {
    if (owns_stream) cudaStreamDestroy(stream);
    return init;
  }
  return std::unique_ptr<Transport>(
      std::make_unique<NcclTransport>(bootstrap, comm, stream, owns_stream));
}

}  // namespace moert::comm
