#include "runtime/comm/loopback.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/log.h"

namespace moert::comm {
namespace {

// Thrown by LoopbackTransport::abort to unwind the aborting rank's thread; caught by
// run_loopback. Deliberately not a std::exception, so `catch (const std::exception&)` in
// the code under test does not swallow it.
struct LoopbackAbort {
  int code;
};

// One rank's part of one operation, immutable once it has arrived.
struct Contribution {
  bool arrived = false;
  std::vector<uint8_t> data;         // the payload copied in at the call
  std::vector<int64_t> send_bytes;   // all_to_all_v: bytes for each destination
  std::vector<int64_t> cu_send;      // all_to_all_v: their offsets in `data`
};

// The n-th operation of every rank.
struct Slot {
  std::string signature;  // "barrier", "broadcast(bytes=8, root=0)", ...; set by the first
  std::vector<Contribution> ranks;
  int num_arrived = 0;
  int num_departed = 0;
};

// State shared by the ranks of one run_loopback call. All members are guarded by mutex.
class Group {
 public:
  explicit Group(int num_ranks) : num_ranks_(num_ranks), finished_(num_ranks, false) {}

  int num_ranks() const { return num_ranks_; }

  // Records the first failure; every waiting and later operation then fails.
  void fail(const Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(status);
  }

  Status failure() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failure_;
  }

  // fn of `rank` has returned or unwound; it will never arrive at another operation.
  void finish(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_[static_cast<size_t>(rank)] = true;
    changed_.notify_all();
  }

  // Posts `rank`'s contribution to operation `seq`. Fails if the group has failed or the
  // signature differs from the one the first arriving rank posted.
  Status arrive(int rank, int64_t seq, const std::string& signature, Contribution contribution) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) return peer_failure_locked(rank, seq, signature);
    Slot& slot = slot_locked(seq);
    if (slot.signature.empty()) {
      slot.signature = signature;
    } else if (slot.signature != signature) {
      Status mismatch = invalid_argument(
          "rank " + std::to_string(rank) + " called " + signature + " as operation #" +
          std::to_string(seq) + " while an earlier rank called " + slot.signature);
      fail_locked(mismatch);
      return mismatch;
    }
    contribution.arrived = true;
    slot.ranks[static_cast<size_t>(rank)] = std::move(contribution);
    ++slot.num_arrived;
    changed_.notify_all();
    return Status::ok();
  }

  // Waits until every rank has arrived at `seq`, then runs read(slot) under the lock and
  // departs. Fails instead if the group fails first or a rank that has not arrived can no
  // longer arrive (its fn has returned).
  template <typename Read>
  Status complete(int rank, int64_t seq, Read&& read) {
    std::unique_lock<std::mutex> lock(mutex_);
    Slot& slot = slot_locked(seq);
    Status status;
    changed_.wait(lock, [&] {
      if (slot.num_arrived == num_ranks_) return true;
      if (failed_) {
        status = peer_failure_locked(rank, seq, slot.signature);
        return true;
      }
      for (int q = 0; q < num_ranks_; ++q) {
        if (!slot.ranks[static_cast<size_t>(q)].arrived && finished_[static_cast<size_t>(q)]) {
          status = internal_error("rank " + std::to_string(q) + " returned without joining " +
                                  slot.signature + " (operation #" + std::to_string(seq) +
                                  ") that rank " + std::to_string(rank) + " waits in");
          fail_locked(status);
          return true;
        }
      }
      return false;
    });
    if (status.is_ok()) {
      status = read(slot);
      if (!status.is_ok()) fail_locked(status);
    }
    if (++slot.num_departed == num_ranks_) slots_.erase(seq);
    return status;
  }

 private:
  Slot& slot_locked(int64_t seq) {
    auto [it, inserted] = slots_.try_emplace(seq);
    if (inserted) it->second.ranks.resize(static_cast<size_t>(num_ranks_));
    return it->second;
  }

  void fail_locked(const Status& status) {
    if (failed_) return;
    failed_ = true;
    failure_ = status;
    changed_.notify_all();
  }

  Status peer_failure_locked(int rank, int64_t seq, const std::string& signature) const {
    return internal_error("rank " + std::to_string(rank) + " cannot complete " +
                          (signature.empty() ? std::string("operation") : signature) + " (#" +
                          std::to_string(seq) + "): " + failure_.message());
  }

  const int num_ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Slot> slots_;
  std::vector<bool> finished_;
  bool failed_ = false;
  Status failure_;
};

template <typename T>
const char* type_name();
template <>
const char* type_name<int64_t>() { return "int64"; }
template <>
const char* type_name<double>() { return "double"; }
template <>
const char* type_name<float>() { return "float"; }

std::vector<uint8_t> copy_bytes(const void* data, size_t bytes) {
  const auto* begin = static_cast<const uint8_t*>(data);
  return bytes == 0 ? std::vector<uint8_t>() : std::vector<uint8_t>(begin, begin + bytes);
}

class LoopbackExchange final : public PendingExchange {
 public:
  LoopbackExchange(Group* group, int rank, int64_t seq, std::string signature, void* recv,
                   std::vector<int64_t> recv_bytes)
      : group_(group), rank_(rank), seq_(seq), signature_(std::move(signature)), recv_(recv),
        recv_bytes_(std::move(recv_bytes)) {}
  ~LoopbackExchange() override {
    if (!done_) (void)wait();
  }

  Status wait() override {
    if (done_) return status_;
    done_ = true;
    const std::vector<int64_t> cu_recv = exclusive_prefix_sum(recv_bytes_);
    status_ = group_->complete(rank_, seq_, [&](const Slot& slot) -> Status {
      const size_t me = static_cast<size_t>(rank_);
      for (size_t src = 0; src < slot.ranks.size(); ++src) {
        const Contribution& from = slot.ranks[src];
        if (from.send_bytes[me] != recv_bytes_[src]) {
          return invalid_argument("rank " + std::to_string(rank_) + ": recv_bytes_per_rank[" +
                                  std::to_string(src) + "] = " + std::to_string(recv_bytes_[src]) +
                                  " but rank " + std::to_string(src) + " sends " +
                                  std::to_string(from.send_bytes[me]) + " bytes (" + signature_ +
                                  " #" + std::to_string(seq_) + ")");
        }
        if (recv_bytes_[src] > 0) {
          std::memcpy(static_cast<uint8_t*>(recv_) + cu_recv[src],
                      from.data.data() + from.cu_send[me], static_cast<size_t>(recv_bytes_[src]));
        }
      }
      return Status::ok();
    });
    return status_;
  }

 private:
  Group* group_;
  int rank_;
  int64_t seq_;
  std::string signature_;
  void* recv_;
  std::vector<int64_t> recv_bytes_;
  bool done_ = false;
  Status status_;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(Group* group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->num_ranks(); }
  BufferLocation buffer_location() const override { return BufferLocation::kHost; }

  Status barrier() override {
    const int64_t seq = next_seq_++;
    MOERT_RETURN_IF_ERROR(group_->arrive(rank_, seq, "barrier", {}));
    return group_->complete(rank_, seq, [](const Slot&) { return Status::ok(); });
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
    const int64_t seq = next_seq_++;
    MOERT_RETURN_IF_ERROR(local_check(validate_root(root, world_size())));
    const std::string signature =
        "broadcast(bytes=" + std::to_string(bytes) + ", root=" + std::to_string(root) + ")";
    Contribution mine;
    if (rank_ == root) mine.data = copy_bytes(data, bytes);
    MOERT_RETURN_IF_ERROR(group_->arrive(rank_, seq, signature, std::move(mine)));
    return group_->complete(rank_, seq, [&](const Slot& slot) {
      if (rank_ != root && bytes > 0) {
        std::memcpy(data, slot.ranks[static_cast<size_t>(root)].data.data(), bytes);
      }
      return Status::ok();
    });
  }

  Status gather(const void* send, size_t bytes, void* recv, int root) override {
    const int64_t seq = next_seq_++;
    MOERT_RETURN_IF_ERROR(local_check(validate_root(root, world_size())));
    const std::string signature =
        "gather(bytes=" + std::to_string(bytes) + ", root=" + std::to_string(root) + ")";
    Contribution mine;
    mine.data = copy_bytes(send, bytes);
    MOERT_RETURN_IF_ERROR(group_->arrive(rank_, seq, signature, std::move(mine)));
    return group_->complete(rank_, seq, [&](const Slot& slot) {
      if (rank_ == root && bytes > 0) {
        for (size_t src = 0; src < slot.ranks.size(); ++src) {
          std::memcpy(static_cast<uint8_t*>(recv) + src * bytes, slot.ranks[src].data.data(),
                      bytes);
        }
      }
      return Status::ok();
    });
  }

  Result<std::vector<std::vector<uint8_t>>> gatherv(const void* send, size_t bytes,
                                                    int root) override {
    const int64_t seq = next_seq_++;
    MOERT_RETURN_IF_ERROR(local_check(validate_root(root, world_size())));
    const std::string signature = "gatherv(root=" + std::to_string(root) + ")";
    Contribution mine;
    mine.data = copy_bytes(send, bytes);
    MOERT_RETURN_IF_ERROR(group_->arrive(rank_, seq, signature, std::move(mine)));
    std::vector<std::vector<uint8_t>> blobs;
    MOERT_RETURN_IF_ERROR(group_->complete(rank_, seq, [&](const Slot& slot) {
      if (rank_ == root) {
        for (const Contribution& from : slot.ranks) blobs.push_back(from.data);
      }
      return Status::ok();
    }));
    return blobs;
  }

  std::unique_ptr<PendingExchange> start_all_to_all_v(
      const void* send, const std::vector<int64_t>& send_bytes_per_rank, void* recv,
      const std::vector<int64_t>& recv_bytes_per_rank) override {
    const int64_t seq = next_seq_++;
    const std::string signature = "all_to_all_v";
    Status valid = validate_counts(send_bytes_per_rank, world_size(), "send_bytes_per_rank");
    if (valid.is_ok()) {
      valid = validate_counts(recv_bytes_per_rank, world_size(), "recv_bytes_per_rank");
    }
    if (!valid.is_ok()) return finished_exchange(local_check(valid));
    Contribution mine;
    mine.send_bytes = send_bytes_per_rank;
    mine.cu_send = exclusive_prefix_sum(send_bytes_per_rank);
    mine.data = copy_bytes(send, static_cast<size_t>(mine.cu_send.back()));
    Status arrived = group_->arrive(rank_, seq, signature, std::move(mine));
    if (!arrived.is_ok()) return finished_exchange(arrived);
    return std::make_unique<LoopbackExchange>(group_, rank_, seq, signature, recv,
                                              recv_bytes_per_rank);
  }

  [[noreturn]] void abort(int code, const std::string& message) override {
    MOERT_ERROR("loopback rank " << rank_ << " aborts with code " << code << ": " << message);
    group_->fail(internal_error("rank " + std::to_string(rank_) + " aborted with code " +
                                std::to_string(code) + ": " + message));
    throw LoopbackAbort{code};
  }

 private:
  template <typename T>
  Status all_reduce_impl(T* data, size_t count, ReduceOp op) {
    const int64_t seq = next_seq_++;
    const std::string signature = std::string("all_reduce(") + type_name<T>() +
                                  ", count=" + std::to_string(count) + ", " +
                                  reduce_op_name(op) + ")";
    Contribution mine;
    mine.data = copy_bytes(data, count * sizeof(T));
    MOERT_RETURN_IF_ERROR(group_->arrive(rank_, seq, signature, std::move(mine)));
    return group_->complete(rank_, seq, [&](const Slot& slot) {
      // Reduce in rank order so that every rank computes the same bits.
      for (size_t i = 0; i < count; ++i) {
        T acc{};
        for (size_t src = 0; src < slot.ranks.size(); ++src) {
          T value;
          std::memcpy(&value, slot.ranks[src].data.data() + i * sizeof(T), sizeof(T));
          if (src == 0) {
            acc = value;
          } else {
            acc = op == ReduceOp::kSum ? acc + value : std::max(acc, value);
          }
        }
        data[i] = acc;
      }
      return Status::ok();
    });
  }

  // A locally detected precondition break also fails the peers, so none of them hangs.
  Status local_check(Status status) {
    if (!status.is_ok()) {
      status = status.with_context("rank " + std::to_string(rank_));
      group_->fail(status);
    }
    return status;
  }

  Group* group_;
  int rank_;
  int64_t next_seq_ = 0;  // index of this rank's next operation; the same on every rank
};

}  // namespace

Status run_loopback(int num_ranks, const std::function<void(Transport&)>& fn) {
  if (num_ranks < 1) {
    return invalid_argument("num_ranks = " + std::to_string(num_ranks) + " must be >= 1");
  }
  Group group(num_ranks);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_ranks));
  for (int rank = 0; rank < num_ranks; ++rank) {
    threads.emplace_back([&group, &fn, rank] {
      {
        LoopbackTransport transport(&group, rank);
        try {
          fn(transport);
        } catch (const LoopbackAbort&) {
          // The failure is already recorded by abort().
        } catch (const std::exception& e) {
          group.fail(internal_error("rank " + std::to_string(rank) + " threw: " + e.what()));
        } catch (...) {
          group.fail(internal_error("rank " + std::to_string(rank) +
                                    " threw an exception that is not a std::exception"));
        }
      }
      group.finish(rank);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return group.failure();
}

}  // namespace moert::comm
