#include "runtime/comm/self_transport.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/log.h"

namespace moert::comm {
namespace {

class SelfTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  BufferLocation buffer_location() const override { return BufferLocation::kHost; }
  Status barrier() override { return Status::ok(); }
  // One rank: the sum and the max of one value are the value.
  Status all_reduce(int64_t*, size_t, ReduceOp) override { return Status::ok(); }
  Status all_reduce(double*, size_t, ReduceOp) override { return Status::ok(); }
  Status all_reduce(float*, size_t, ReduceOp) override { return Status::ok(); }

  Status broadcast(void*, size_t, int root) override { return validate_root(root, 1); }

  Status gather(const void* send, size_t bytes, void* recv, int root) override {
    MOERT_RETURN_IF_ERROR(validate_root(root, 1));
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
    return Status::ok();
  }

  Result<std::vector<std::vector<uint8_t>>> gatherv(const void* send, size_t bytes, int root) override {
    MOERT_RETURN_IF_ERROR(validate_root(root, 1));
    const auto* begin = static_cast<const uint8_t*>(send);
    std::vector<std::vector<uint8_t>> blobs(1);
    if (bytes > 0) blobs[0].assign(begin, begin + bytes);
    return blobs;
  }

  std::unique_ptr<PendingExchange> start_all_to_all_v(const void* send, const std::vector<int64_t>& send_bytes,
                                                      void* recv, const std::vector<int64_t>& recv_bytes) override {
    Status status = validate_counts(send_bytes, 1, "send_bytes_per_rank");
    if (status.is_ok()) status = validate_counts(recv_bytes, 1, "recv_bytes_per_rank");
    if (status.is_ok() && send_bytes[0] != recv_bytes[0]) {
      status = invalid_argument("rank 0 sends " + std::to_string(send_bytes[0]) + " bytes to itself but expects " +
                                std::to_string(recv_bytes[0]));
    }
    if (status.is_ok() && send_bytes[0] > 0 && send != recv) {
      std::memmove(recv, send, static_cast<size_t>(send_bytes[0]));
    }
    return finished_exchange(status);
  }

  [[noreturn]] void abort(int code, const std::string& message) override {
    const std::string line = "[moert r0@" + process_identity().host + " error] " + message + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    std::_Exit(code != 0 ? code : 1);
  }
};

}  // namespace

std::unique_ptr<Transport> make_self_transport() { return std::make_unique<SelfTransport>(); }

}  // namespace moert::comm
