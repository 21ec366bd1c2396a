#include "tests/runtime/comm/comm_checks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace moert::comm::testing {
namespace {

constexpr uint64_t kSentinel = 0xDEADBEEFCAFEF00DULL;
constexpr int kGuardElements = 4;  // untouched elements after every receive buffer

// One rank's side of an all-to-all of encoded uint64 elements, built from num_elements.
struct Exchange {
  int seed = 0;
  std::vector<int64_t> send_bytes, recv_bytes;  // [N]
  std::vector<uint64_t> send, recv;             // recv ends with kGuardElements sentinels

  Exchange(const Transport& transport, int exchange_seed) : seed(exchange_seed) {
    const int me = transport.rank();
    const int n = transport.world_size();
    for (int peer = 0; peer < n; ++peer) {
      const int64_t num_send = num_elements(me, peer, seed);
      for (int64_t k = 0; k < num_send; ++k) send.push_back(encode_element(me, peer, k));
      send_bytes.push_back(num_send * 8);
      recv_bytes.push_back(num_elements(peer, me, seed) * 8);
    }
    const int64_t total = exclusive_prefix_sum(recv_bytes).back() / 8;
    recv.assign(static_cast<size_t>(total + kGuardElements), kSentinel);
  }

  std::unique_ptr<PendingExchange> start(Transport& transport) {
    return transport.start_all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
  }

  // Every element came from the right source, for this rank, at the right index.
  void expect_received(const Transport& transport) const {
    const int me = transport.rank();
    const std::vector<int64_t> cu_recv = exclusive_prefix_sum(recv_bytes);
    int64_t num_wrong = 0;
    for (int src = 0; src < transport.world_size(); ++src) {
      const int64_t begin = cu_recv[static_cast<size_t>(src)] / 8;
      for (int64_t k = 0; k < num_elements(src, me, seed); ++k) {
        const uint64_t got = recv[static_cast<size_t>(begin + k)];
        if (got != encode_element(src, me, k) && num_wrong++ < 5) {
          ADD_FAILURE() << "seed " << seed << ": rank " << me << " element " << k << " from rank "
                        << src << " is 0x" << std::hex << got << ", expected 0x"
                        << encode_element(src, me, k);
        }
      }
    }
    EXPECT_EQ(num_wrong, 0) << "seed " << seed << " on rank " << me;
    for (int g = 0; g < kGuardElements; ++g) {
      EXPECT_EQ(recv[recv.size() - 1 - static_cast<size_t>(g)], kSentinel)
          << "write past the receive buffer on rank " << me;
    }
  }
};

}  // namespace

uint64_t encode_element(int src, int dst, int64_t index) {
  return (static_cast<uint64_t>(src + 1) << 48) | (static_cast<uint64_t>(dst + 1) << 32) |
         static_cast<uint64_t>(index & 0xFFFFFFFF);
}

int64_t num_elements(int src, int dst, int seed) {
  int64_t base = (src * 7 + dst * 13 + seed * 5 + src * dst) % 6;  // 0..5, some pairs empty
  if (seed >= 3) base *= 10007;  // larger than the eager limits of the MPI transports
  return base;
}

void check_identity_and_barrier(Transport& transport) {
  const int n = transport.world_size();
  const int me = transport.rank();
  ASSERT_GE(n, 1);
  ASSERT_GE(me, 0);
  ASSERT_LT(me, n);
  EXPECT_EQ(transport.buffer_location(), BufferLocation::kHost);
  EXPECT_TRUE(transport.barrier().is_ok());
  int64_t one = 1;
  EXPECT_TRUE(transport.all_reduce(&one, 1, ReduceOp::kSum).is_ok());
  EXPECT_EQ(one, n);
  const int32_t my_rank = me;
  std::vector<int32_t> ranks(static_cast<size_t>(n), -1);
  EXPECT_TRUE(transport.gather(&my_rank, sizeof(my_rank), me == 0 ? ranks.data() : nullptr, 0)
                  .is_ok());
  if (me == 0) {
    for (int r = 0; r < n; ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)], r);
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(transport.barrier().is_ok());
}

void check_all_reduce(Transport& transport) {
  const int n = transport.world_size();
  const int me = transport.rank();
  {
    std::vector<int64_t> sums(5), maxes(5);
    for (int i = 0; i < 5; ++i) {
      sums[static_cast<size_t>(i)] = me * 100 + i;
      maxes[static_cast<size_t>(i)] = (me == i % n) ? 1000 + i : -i;
    }
    EXPECT_TRUE(transport.all_reduce(sums.data(), sums.size(), ReduceOp::kSum).is_ok());
    EXPECT_TRUE(transport.all_reduce(maxes.data(), maxes.size(), ReduceOp::kMax).is_ok());
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(sums[static_cast<size_t>(i)], 100 * n * (n - 1) / 2 + n * i) << "i = " << i;
      EXPECT_EQ(maxes[static_cast<size_t>(i)], 1000 + i) << "i = " << i;
    }
  }
  {
    std::vector<double> sums(3, me + 0.5);
    sums[2] = -me;
    std::vector<double> maxes = {static_cast<double>(me), -static_cast<double>(me)};
    EXPECT_TRUE(transport.all_reduce(sums.data(), sums.size(), ReduceOp::kSum).is_ok());
    EXPECT_TRUE(transport.all_reduce(maxes.data(), maxes.size(), ReduceOp::kMax).is_ok());
    EXPECT_EQ(sums[0], n * (n - 1) / 2.0 + 0.5 * n);
    EXPECT_EQ(sums[2], -n * (n - 1) / 2.0);
    EXPECT_EQ(maxes[0], n - 1.0);
    EXPECT_EQ(maxes[1], 0.0);
  }
  {
    std::vector<float> sums(4), maxes(4);
    for (int i = 0; i < 4; ++i) {
      sums[static_cast<size_t>(i)] = static_cast<float>(me * i);
      maxes[static_cast<size_t>(i)] = static_cast<float>(i % 2 == 1 ? me : -me) - 0.25f;
    }
    EXPECT_TRUE(transport.all_reduce(sums.data(), sums.size(), ReduceOp::kSum).is_ok());
    EXPECT_TRUE(transport.all_reduce(maxes.data(), maxes.size(), ReduceOp::kMax).is_ok());
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(sums[static_cast<size_t>(i)], static_cast<float>(i * n * (n - 1) / 2));
      EXPECT_EQ(maxes[static_cast<size_t>(i)], (i % 2 == 1 ? n - 1.0f : 0.0f) - 0.25f);
    }
  }
  {
    // Zero elements, and a larger array.
    EXPECT_TRUE(transport.all_reduce(static_cast<double*>(nullptr), 0, ReduceOp::kSum).is_ok());
    std::vector<int64_t> big(100000);
    std::iota(big.begin(), big.end(), static_cast<int64_t>(me));
    EXPECT_TRUE(transport.all_reduce(big.data(), big.size(), ReduceOp::kSum).is_ok());
    int64_t num_wrong = 0;
    for (size_t i = 0; i < big.size(); ++i) {
      num_wrong += big[i] != static_cast<int64_t>(i) * n + n * (n - 1) / 2;
    }
    EXPECT_EQ(num_wrong, 0);
  }
}

void check_broadcast(Transport& transport) {
  const int me = transport.rank();
  for (int root = 0; root < transport.world_size(); ++root) {
    std::vector<uint8_t> data(37, 0xEE);
    if (me == root) {
      for (size_t j = 0; j < data.size(); ++j) data[j] = static_cast<uint8_t>(root * 31 + j);
    }
    EXPECT_TRUE(transport.broadcast(data.data(), data.size(), root).is_ok());
    for (size_t j = 0; j < data.size(); ++j) {
      EXPECT_EQ(data[j], static_cast<uint8_t>(root * 31 + j)) << "root " << root << " byte " << j;
    }
    EXPECT_TRUE(transport.broadcast(nullptr, 0, root).is_ok());
  }
}

void check_gather(Transport& transport) {
  const int n = transport.world_size();
  const int me = transport.rank();
  constexpr size_t kBytes = 12;
  for (int root = 0; root < n; ++root) {
    std::vector<uint8_t> send(kBytes);
    for (size_t j = 0; j < kBytes; ++j) send[j] = static_cast<uint8_t>(me * 17 + j + root);
    std::vector<uint8_t> recv(me == root ? kBytes * static_cast<size_t>(n) : 0, 0xEE);
    EXPECT_TRUE(
        transport.gather(send.data(), kBytes, me == root ? recv.data() : nullptr, root).is_ok());
    if (me == root) {
      for (int src = 0; src < n; ++src) {
        for (size_t j = 0; j < kBytes; ++j) {
          EXPECT_EQ(recv[static_cast<size_t>(src) * kBytes + j],
                    static_cast<uint8_t>(src * 17 + j + root))
              << "root " << root << " src " << src << " byte " << j;
        }
      }
    }
  }
}

void check_gatherv(Transport& transport) {
  const int n = transport.world_size();
  const int me = transport.rank();
  const int root = n - 1;
  std::vector<uint8_t> send(static_cast<size_t>(me) * 3);  // rank 0 sends nothing
  for (size_t j = 0; j < send.size(); ++j) send[j] = static_cast<uint8_t>(me + j * 5);
  auto blobs = transport.gatherv(send.empty() ? nullptr : send.data(), send.size(), root);
  ASSERT_TRUE(blobs.is_ok()) << blobs.status().to_string();
  if (me != root) {
    EXPECT_TRUE(blobs->empty());
    return;
  }
  ASSERT_EQ(blobs->size(), static_cast<size_t>(n));
  for (int src = 0; src < n; ++src) {
    const std::vector<uint8_t>& blob = (*blobs)[static_cast<size_t>(src)];
    ASSERT_EQ(blob.size(), static_cast<size_t>(src) * 3) << "blob of rank " << src;
    for (size_t j = 0; j < blob.size(); ++j) {
      EXPECT_EQ(blob[j], static_cast<uint8_t>(src + j * 5)) << "rank " << src << " byte " << j;
    }
  }
}

void check_all_to_all_payloads(Transport& transport, int seed) {
  const int me = transport.rank();
  const int n = transport.world_size();
  std::vector<int64_t> send_counts(static_cast<size_t>(n));
  for (int dst = 0; dst < n; ++dst) send_counts[static_cast<size_t>(dst)] = num_elements(me, dst, seed);
  Result<std::vector<int64_t>> recv_counts = transport.all_to_all_counts(send_counts);
  EXPECT_TRUE(recv_counts.is_ok()) << recv_counts.status().to_string();
  EXPECT_TRUE(!recv_counts.is_ok() || recv_counts->size() == static_cast<size_t>(n));
  if (recv_counts.is_ok() && recv_counts->size() == static_cast<size_t>(n)) {
    for (int src = 0; src < n; ++src) {
      EXPECT_EQ((*recv_counts)[static_cast<size_t>(src)], num_elements(src, me, seed))
          << "count from rank " << src << " at rank " << me;
    }
  }
  Exchange exchange(transport, seed);
  Status status = exchange.start(transport)->wait();
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  exchange.expect_received(transport);
}

void check_all_to_all_odd_bytes(Transport& transport) {
  const int me = transport.rank();
  const int n = transport.world_size();
  auto num_bytes = [](int src, int dst) -> int64_t { return (src + 2 * dst + 1) % 5; };
  auto byte_at = [](int src, int dst, int64_t k) {
    return static_cast<uint8_t>(src * 37 + dst * 11 + k);
  };
  std::vector<int64_t> send_bytes, recv_bytes;
  std::vector<uint8_t> send;
  for (int peer = 0; peer < n; ++peer) {
    for (int64_t k = 0; k < num_bytes(me, peer); ++k) send.push_back(byte_at(me, peer, k));
    send_bytes.push_back(num_bytes(me, peer));
    recv_bytes.push_back(num_bytes(peer, me));
  }
  const std::vector<int64_t> cu_recv = exclusive_prefix_sum(recv_bytes);
  std::vector<uint8_t> recv(static_cast<size_t>(cu_recv.back()) + 3, 0xA5);
  Status status =
      transport.start_all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes)->wait();
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  for (int src = 0; src < n; ++src) {
    for (int64_t k = 0; k < num_bytes(src, me); ++k) {
      EXPECT_EQ(recv[static_cast<size_t>(cu_recv[static_cast<size_t>(src)] + k)],
                byte_at(src, me, k))
          << "byte " << k << " from rank " << src << " at rank " << me;
    }
  }
  for (size_t g = recv.size() - 3; g < recv.size(); ++g) EXPECT_EQ(recv[g], 0xA5);
}

void check_zero_size_exchanges(Transport& transport) {
  const int me = transport.rank();
  const int n = transport.world_size();
  const std::vector<int64_t> zeros(static_cast<size_t>(n), 0);
  {
    Status status = transport.start_all_to_all_v(nullptr, zeros, nullptr, zeros)->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
  }
  {
    // Only the segment to oneself is non-empty.
    std::vector<int64_t> bytes = zeros;
    bytes[static_cast<size_t>(me)] = 8;
    const uint64_t send = encode_element(me, me, 0);
    uint64_t recv = 0;
    Status status = transport.start_all_to_all_v(&send, bytes, &recv, bytes)->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_EQ(recv, send);
  }
  {
    // Only rank 0 sends (8 bytes to everyone); the other ranks send nothing.
    std::vector<int64_t> send_bytes = me == 0 ? std::vector<int64_t>(static_cast<size_t>(n), 8)
                                              : zeros;
    std::vector<int64_t> recv_bytes = zeros;
    recv_bytes[0] = 8;
    std::vector<uint64_t> send;
    if (me == 0) {
      for (int dst = 0; dst < n; ++dst) send.push_back(encode_element(0, dst, 7));
    }
    uint64_t recv = 0;
    Status status = transport
                        .start_all_to_all_v(send.empty() ? nullptr : send.data(), send_bytes,
                                            &recv, recv_bytes)
                        ->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_EQ(recv, encode_element(0, me, 7));
  }
  Result<std::vector<int64_t>> counts = transport.all_to_all_counts(zeros);
  ASSERT_TRUE(counts.is_ok()) << counts.status().to_string();
  EXPECT_EQ(*counts, zeros);
}

void check_overlap(Transport& transport) {
  {
    Exchange exchange(transport, 1);
    std::unique_ptr<PendingExchange> pending = exchange.start(transport);
    // Work that does not touch the exchange's buffers, done while it is in flight.
    std::vector<double> work(200000);
    std::iota(work.begin(), work.end(), 0.0);
    const double total = std::accumulate(work.begin(), work.end(), 0.0);
    EXPECT_EQ(total, 199999.0 * 200000.0 / 2.0);
    Status status = pending->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    EXPECT_TRUE(pending->wait().is_ok()) << "a second wait returns the same Status";
    exchange.expect_received(transport);
  }
  {
    Exchange first(transport, 2);
    Exchange second(transport, 3);
    std::unique_ptr<PendingExchange> pending_first = first.start(transport);
    std::unique_ptr<PendingExchange> pending_second = second.start(transport);
    Status status = pending_second->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    status = pending_first->wait();
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    first.expect_received(transport);
    second.expect_received(transport);
  }
  {
    // Destroyed without wait(): the destructor waits, and the next collective still works.
    Exchange exchange(transport, 4);
    exchange.start(transport).reset();
    exchange.expect_received(transport);
    EXPECT_TRUE(transport.barrier().is_ok());
  }
}

void check_everything(Transport& transport) {
  check_identity_and_barrier(transport);
  check_all_reduce(transport);
  check_broadcast(transport);
  check_gather(transport);
  check_gatherv(transport);
  for (int seed = 0; seed < 5; ++seed) check_all_to_all_payloads(transport, seed);
  check_all_to_all_odd_bytes(transport);
  check_zero_size_exchanges(transport);
  check_overlap(transport);
}

}  // namespace moert::comm::testing
