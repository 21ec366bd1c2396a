#include "runtime/comm/transport.h"

#include <string>
#include <utility>

namespace moert::comm {
namespace {

class FinishedExchange final : public PendingExchange {
 public:
  explicit FinishedExchange(Status status) : status_(std::move(status)) {}
  Status wait() override { return status_; }

 private:
  Status status_;
};

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::vector<int64_t> exclusive_prefix_sum(const std::vector<int64_t>& counts) {
  std::vector<int64_t> cu(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) cu[i + 1] = cu[i] + counts[i];
  return cu;
}

Status validate_counts(const std::vector<int64_t>& counts, int world_size, const char* what) {
  if (counts.size() != static_cast<size_t>(world_size)) {
    return invalid_argument(std::string(what) + " has " + std::to_string(counts.size()) +
                            " entries, expected world_size = " + std::to_string(world_size));
  }
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      return invalid_argument(std::string(what) + "[" + std::to_string(r) + "] = " +
                              std::to_string(counts[r]) + " must be >= 0");
    }
  }
  return Status::ok();
}

Status validate_root(int root, int world_size) {
  if (root < 0 || root >= world_size) {
    return invalid_argument("root = " + std::to_string(root) + " must be in [0, " +
                            std::to_string(world_size) + ")");
  }
  return Status::ok();
}

std::unique_ptr<PendingExchange> finished_exchange(Status status) {
  return std::make_unique<FinishedExchange>(std::move(status));
}

Result<std::vector<int64_t>> Transport::all_to_all_counts(const std::vector<int64_t>& send_counts) {
  // A send_counts of the wrong size gives send_bytes of the wrong size, which the
  // implementation's start_all_to_all_v rejects in its own way (without hanging peers).
  const auto kEntryBytes = static_cast<int64_t>(sizeof(int64_t));
  const std::vector<int64_t> send_bytes(send_counts.size(), kEntryBytes);
  const std::vector<int64_t> recv_bytes(static_cast<size_t>(world_size()), kEntryBytes);
  std::vector<int64_t> recv_counts(recv_bytes.size(), 0);
  Status status =
      start_all_to_all_v(send_counts.data(), send_bytes, recv_counts.data(), recv_bytes)->wait();
  if (!status.is_ok()) return status.with_context("all_to_all_counts");
  return recv_counts;
}

}  // namespace moert::comm
