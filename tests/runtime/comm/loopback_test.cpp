#include "runtime/comm/loopback.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/comm/comm_checks.h"

namespace moert::comm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Statuses that each rank saw, indexed by rank.
class PerRank {
 public:
  explicit PerRank(int num_ranks) : statuses_(static_cast<size_t>(num_ranks)) {}
  void set(int rank, Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    statuses_[static_cast<size_t>(rank)] = std::move(status);
  }
  const Status& at(int rank) const { return statuses_[static_cast<size_t>(rank)]; }

 private:
  std::mutex mutex_;
  std::vector<Status> statuses_;
};

class LoopbackRanks : public ::testing::TestWithParam<int> {};

TEST_P(LoopbackRanks, PassesEveryTransportCheck) {
  Status status = run_loopback(GetParam(), [](Transport& transport) {
    testing::check_everything(transport);
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
}

TEST_P(LoopbackRanks, GivesEachThreadItsOwnRank) {
  const int n = GetParam();
  std::mutex mutex;
  std::vector<int> seen;
  Status status = run_loopback(n, [&](Transport& transport) {
    EXPECT_EQ(transport.world_size(), n);
    std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(transport.rank());
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  std::sort(seen.begin(), seen.end());
  std::vector<int> expected(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) expected[static_cast<size_t>(r)] = r;
  EXPECT_EQ(seen, expected);
}

TEST_P(LoopbackRanks, SumsAreBitwiseIdenticalOnEveryRank) {
  const int n = GetParam();
  std::vector<float> results(static_cast<size_t>(n));
  Status status = run_loopback(n, [&](Transport& transport) {
    float value = 0.1f * static_cast<float>(transport.rank() + 1) + 1e-7f;
    EXPECT_TRUE(transport.all_reduce(&value, 1, ReduceOp::kSum).is_ok());
    results[static_cast<size_t>(transport.rank())] = value;
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  for (int r = 1; r < n; ++r) {
    EXPECT_EQ(std::memcmp(&results[0], &results[static_cast<size_t>(r)], sizeof(float)), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LoopbackRanks, ::testing::Values(1, 2, 3, 4));

TEST(Loopback, RejectsZeroRanks) {
  Status status = run_loopback(0, [](Transport&) {});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(status.message(), "num_ranks = 0")) << status.message();
}

TEST(Loopback, SendBufferIsReusableRightAfterStart) {
  Status status = run_loopback(3, [](Transport& transport) {
    const int n = transport.world_size();
    std::vector<int64_t> send(static_cast<size_t>(n), transport.rank() * 10);
    std::vector<int64_t> recv(static_cast<size_t>(n), -1);
    const std::vector<int64_t> bytes(static_cast<size_t>(n), 8);
    auto pending = transport.start_all_to_all_v(send.data(), bytes, recv.data(), bytes);
    std::fill(send.begin(), send.end(), -99);
    EXPECT_TRUE(pending->wait().is_ok());
    for (int src = 0; src < n; ++src) EXPECT_EQ(recv[static_cast<size_t>(src)], src * 10);
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
}

// ---- Failures end every rank's wait with a Status; nothing hangs --------------------------

TEST(LoopbackFailure, AbortFailsPeersWaitingInBarrier) {
  constexpr int kRanks = 4;
  PerRank seen(kRanks);
  Status status = run_loopback(kRanks, [&](Transport& transport) {
    if (transport.rank() == 1) {
      std::this_thread::sleep_for(20ms);  // let the peers block in barrier() first
      transport.abort(3, "gives up on purpose");
    }
    seen.set(transport.rank(), transport.barrier());
    // Every later operation fails at once too.
    int64_t value = 1;
    EXPECT_FALSE(transport.all_reduce(&value, 1, ReduceOp::kSum).is_ok());
  });
  EXPECT_FALSE(status.is_ok());
  EXPECT_TRUE(contains(status.message(), "rank 1 aborted with code 3: gives up on purpose"))
      << status.message();
  for (int r : {0, 2, 3}) {
    EXPECT_FALSE(seen.at(r).is_ok()) << "rank " << r;
    EXPECT_TRUE(contains(seen.at(r).message(), "rank 1 aborted with code 3")) << seen.at(r).message();
    EXPECT_TRUE(contains(seen.at(r).message(), "barrier")) << seen.at(r).message();
  }
}

TEST(LoopbackFailure, AbortFailsPeersPendingExchanges) {
  constexpr int kRanks = 3;
  PerRank seen(kRanks);
  Status status = run_loopback(kRanks, [&](Transport& transport) {
    const std::vector<int64_t> bytes(kRanks, 8);
    std::vector<int64_t> send(kRanks, transport.rank()), recv(kRanks, -1);
    if (transport.rank() == 2) {
      std::this_thread::sleep_for(20ms);
      transport.abort(5, "cannot dispatch");
    }
    auto pending = transport.start_all_to_all_v(send.data(), bytes, recv.data(), bytes);
    seen.set(transport.rank(), pending->wait());
  });
  EXPECT_TRUE(contains(status.message(), "rank 2 aborted with code 5: cannot dispatch"))
      << status.message();
  for (int r : {0, 1}) {
    EXPECT_FALSE(seen.at(r).is_ok());
    EXPECT_TRUE(contains(seen.at(r).message(), "all_to_all_v")) << seen.at(r).message();
  }
}

TEST(LoopbackFailure, ExceptionOnOneRankFailsThePeersAndIsReported) {
  constexpr int kRanks = 3;
  PerRank seen(kRanks);
  Status status = run_loopback(kRanks, [&](Transport& transport) {
    if (transport.rank() == 0) throw std::runtime_error("boom");
    double value = 1.0;
    seen.set(transport.rank(), transport.all_reduce(&value, 1, ReduceOp::kMax));
  });
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_TRUE(contains(status.message(), "rank 0 threw: boom")) << status.message();
  EXPECT_FALSE(seen.at(1).is_ok());
  EXPECT_FALSE(seen.at(2).is_ok());
}

TEST(LoopbackFailure, RankReturningEarlyFailsThePeersWaitingForIt) {
  PerRank seen(2);
  Status status = run_loopback(2, [&](Transport& transport) {
    if (transport.rank() == 1) return;
    seen.set(0, transport.barrier());
  });
  EXPECT_FALSE(seen.at(0).is_ok());
  EXPECT_TRUE(contains(seen.at(0).message(), "rank 1 returned without joining barrier"))
      << seen.at(0).message();
  EXPECT_FALSE(status.is_ok()) << "the early return is reported by run_loopback";
}

TEST(LoopbackFailure, MismatchedOperationsFailOnBothRanks) {
  PerRank seen(2);
  Status status = run_loopback(2, [&](Transport& transport) {
    if (transport.rank() == 0) {
      seen.set(0, transport.barrier());
    } else {
      int64_t value = 0;
      seen.set(1, transport.broadcast(&value, sizeof(value), 0));
    }
  });
  EXPECT_FALSE(seen.at(0).is_ok());
  EXPECT_FALSE(seen.at(1).is_ok());
  EXPECT_TRUE(contains(status.message(), "while an earlier rank called")) << status.message();
}

TEST(LoopbackFailure, ReceiveCountsThatDisagreeWithTheSenderFail) {
  PerRank seen(2);
  Status status = run_loopback(2, [&](Transport& transport) {
    const std::vector<int64_t> send_bytes = {8, 8};
    // Rank 1 expects 16 bytes from rank 0, which sends it 8.
    const std::vector<int64_t> recv_bytes =
        transport.rank() == 1 ? std::vector<int64_t>{16, 8} : std::vector<int64_t>{8, 8};
    std::vector<uint8_t> send(16, 1), recv(24, 0);
    seen.set(transport.rank(),
             transport.start_all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes)->wait());
  });
  EXPECT_EQ(seen.at(1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(seen.at(1).message(), "recv_bytes_per_rank[0] = 16 but rank 0 sends 8"))
      << seen.at(1).message();
  EXPECT_FALSE(status.is_ok());
}

TEST(LoopbackFailure, BadArgumentsOnOneRankFailThePeersToo) {
  PerRank seen(3);
  Status status = run_loopback(3, [&](Transport& transport) {
    std::vector<int64_t> bytes(3, 0);
    if (transport.rank() == 2) bytes = {0, -4, 0};
    seen.set(transport.rank(),
             transport.start_all_to_all_v(nullptr, bytes, nullptr, std::vector<int64_t>(3, 0))
                 ->wait());
  });
  EXPECT_EQ(seen.at(2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(seen.at(2).message(), "send_bytes_per_rank[1] = -4 must be >= 0"))
      << seen.at(2).message();
  EXPECT_FALSE(seen.at(0).is_ok());
  EXPECT_FALSE(seen.at(1).is_ok());
  EXPECT_TRUE(contains(status.message(), "rank 2")) << status.message();

  status = run_loopback(2, [&](Transport& transport) {
    int64_t value = 0;
    Status bad = transport.broadcast(&value, sizeof(value), transport.rank() == 0 ? 7 : 0);
    EXPECT_FALSE(bad.is_ok());
    if (transport.rank() == 0) {
      EXPECT_TRUE(contains(bad.message(), "root = 7 must be in [0, 2)")) << bad.message();
    }
  });
  EXPECT_FALSE(status.is_ok());
}

TEST(LoopbackFailure, WrongSizedCountsOnOneRankFailWithoutHanging) {
  PerRank seen(2);
  Status status = run_loopback(2, [&](Transport& transport) {
    const std::vector<int64_t> counts =
        transport.rank() == 0 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2};
    Result<std::vector<int64_t>> result = transport.all_to_all_counts(counts);
    seen.set(transport.rank(), result.status());
  });
  EXPECT_EQ(seen.at(0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(seen.at(0).message(), "send_bytes_per_rank has 1 entries"))
      << seen.at(0).message();
  EXPECT_FALSE(seen.at(1).is_ok());
  EXPECT_FALSE(status.is_ok());
}

}  // namespace
}  // namespace moert::comm
