#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace moert {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, 3, [&](int64_t begin, int64_t end) {
        ASSERT_LE(begin, end);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, ReusableAcrossManyCalls) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 500; ++round) {
    pool.parallel_for(100, 1, [&](int64_t begin, int64_t end) {
      int64_t local = 0;
      for (int64_t i = begin; i < end; ++i) local += i;
      total += local;
    });
  }
  EXPECT_EQ(total.load(), 500 * 4950);
}

TEST(ThreadPool, ChunksDependOnlyOnSizes) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> first, second;
  std::mutex mutex;
  auto record = [&](std::vector<std::pair<int64_t, int64_t>>& out) {
    pool.parallel_for(100, 10, [&](int64_t begin, int64_t end) {
      std::lock_guard<std::mutex> lock(mutex);
      out.emplace_back(begin, end);
    });
    std::sort(out.begin(), out.end());
  };
  record(first);
  record(second);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first.size(), static_cast<size_t>(pool.num_threads()));
  EXPECT_EQ(pool.num_threads(), std::min(3, max_threads()));
}

// Workers and the caller that sleep between calls (MOERT_SPIN_US=0: no spinning) are woken
// for every call and every result arrives: the futex hand-off of the lock-free pool.
TEST(ThreadPool, SleepingThreadsWakeForEveryCall) {
  const char* saved = std::getenv("MOERT_SPIN_US");
  const std::string previous = saved != nullptr ? saved : "";
  setenv("MOERT_SPIN_US", "0", 1);
  ThreadPool pool(3);
  if (saved != nullptr) setenv("MOERT_SPIN_US", previous.c_str(), 1);
  else unsetenv("MOERT_SPIN_US");
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 300; ++round) {
    pool.parallel_for(30, 1, [&](int64_t begin, int64_t end) {
      if (round % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // the caller waits asleep
      total += end - begin;
    });
    if (round % 11 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // workers fall asleep
  }
  EXPECT_EQ(total.load(), 300 * 30);
}

// An exception thrown by fn on a worker reaches the caller (after every chunk finished) instead
// of terminating the process; the pool stays usable.
TEST(ThreadPool, ExceptionOnAnyThreadReachesTheCaller) {
  ThreadPool pool(3);
  if (pool.num_threads() < 2) GTEST_SKIP() << "one thread: no worker to throw";
  for (bool first_throws : {true, false}) {
    std::atomic<int> finished{0};
    EXPECT_THROW(pool.parallel_for(30, 10,
                                   [&](int64_t begin, int64_t end) {
                                     if ((first_throws && begin == 0) || (!first_throws && end == 30)) {
                                       throw std::runtime_error("chunk failed");
                                     }
                                     finished++;
                                   }),
                 std::runtime_error);
    EXPECT_EQ(finished.load(), pool.num_threads() - 1);  // every other chunk ran (one chunk per thread)
  }
  std::atomic<int64_t> total{0};
  pool.parallel_for(30, 10, [&](int64_t begin, int64_t end) { total += end - begin; });
  EXPECT_EQ(total.load(), 30);
}

// parallel_for_balanced: every index once, one chunk per thread, bounds in whole quanta.
TEST(ThreadPool, BalancedCoversEveryIndexOnceInQuanta) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t quantum : {1, 4}) {
      for (int64_t n : {0, 1, 5, 64, 1001, 65536}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        for (int round = 0; round < 3; ++round) {
          pool.parallel_for_balanced(n, quantum, [&](int64_t begin, int64_t end) {
            ASSERT_LE(begin, end);
            ASSERT_EQ(begin % quantum, 0) << begin;
            ASSERT_TRUE(end % quantum == 0 || end == n) << end;
            calls++;
            for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
          });
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 3) << "n=" << n << " i=" << i;
        if (n >= pool.num_threads() * quantum) EXPECT_EQ(calls.load(), 3 * pool.num_threads()) << "n=" << n;
      }
    }
  }
}

// The shares follow the threads' speeds: with the calling thread made eight times slower per
// index, its share falls well below half (to the floor, a quarter), and rises well above half
// once the worker is the slow one. The work sleeps rather than spins, so other processes on the
// machine (ctest -j) disturb it by no more than their wake-up delays.
TEST(ThreadPool, BalancedSharesFollowTheThreadsSpeeds) {
  ThreadPool pool(2);
  if (pool.num_threads() < 2) GTEST_SKIP() << "one thread";
  const std::thread::id caller = std::this_thread::get_id();
  const auto run = [&](bool caller_slow) {
    for (int round = 0; round < 60; ++round) {
      pool.parallel_for_balanced(4096, 1, [&](int64_t begin, int64_t end) {
        const bool slow = (std::this_thread::get_id() == caller) == caller_slow;
        std::this_thread::sleep_for(std::chrono::nanoseconds((end - begin) * (slow ? 2000 : 250)));
      });
    }
    return pool.balanced_shares();
  };
  EXPECT_EQ(pool.balanced_shares(), (std::vector<double>{0.5, 0.5}));
  const std::vector<double> caller_slow = run(true);
  EXPECT_LT(caller_slow[0], 0.4);
  EXPECT_NEAR(caller_slow[0] + caller_slow[1], 1.0, 1e-9);
  const std::vector<double> worker_slow = run(false);
  EXPECT_GT(worker_slow[0], 0.6);
}

// The share update: a long call moves the shares a fifth of the way toward the speeds, a call
// of a tenth of that length a tenth as far (a worker's wake-up weighs most in short calls), the
// floor holds, and a slot that ran nothing leaves them as they were.
TEST(ThreadPool, SharesMoveByTheCallsLength) {
  const std::vector<double> even{0.5, 0.5};
  const std::vector<double> units{32, 32};
  // speeds 2 : 1 -> proportions 2/3, 1/3
  const std::vector<double> after_long = balanced_shares_after(even, units, {1e-3, 2e-3});
  EXPECT_NEAR(after_long[0], 0.8 * 0.5 + 0.2 * 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(after_long[1], 0.8 * 0.5 + 0.2 / 3.0, 1e-12);
  const std::vector<double> after_short = balanced_shares_after(even, units, {10e-6, 20e-6});
  EXPECT_NEAR(after_short[0], 0.98 * 0.5 + 0.02 * 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(after_short[0] + after_short[1], 1.0, 1e-12);
  // a slot 100 times slower: the proportion is ~1% but the share stops at the floor (then renormalised)
  // (0.8 * 0.3 + 0.2 / 101 < 0.25)
  const std::vector<double> floored = balanced_shares_after({0.7, 0.3}, units, {1e-3, 100e-3});
  EXPECT_NEAR(floored[1] / floored[0], 0.25 / (0.8 * 0.7 + 0.2 * 100.0 / 101.0), 1e-12);
  EXPECT_EQ(balanced_shares_after(even, {64, 0}, {1e-3, 0.0}), even);
}

TEST(ThreadPool, BalancedExceptionReachesTheCaller) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for_balanced(300, 1,
                                          [&](int64_t begin, int64_t) {
                                            if (begin == 0) throw std::runtime_error("chunk failed");
                                          }),
               std::runtime_error);
  std::atomic<int64_t> total{0};
  pool.parallel_for_balanced(300, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  pool.parallel_for(30, 10, [&](int64_t begin, int64_t end) { total += end - begin; });
  EXPECT_EQ(total.load(), 330);
}

}  // namespace
}  // namespace moert

namespace moert {
namespace {

// A launcher that bound the rank (mask narrower than the machine) decides; on an unbound
// node the ranks share the cores; never fewer than one thread.
TEST(ThreadsForRank, FollowTheMaskOrShareTheNode) {
  EXPECT_EQ(threads_for_rank(4, 64, 16), 4);   // srun --cpus-per-task=4
  EXPECT_EQ(threads_for_rank(64, 64, 1), 64);  // one rank, unbound
  EXPECT_EQ(threads_for_rank(64, 64, 4), 16);  // mpirun --bind-to none, 4 ranks on the node
  EXPECT_EQ(threads_for_rank(2, 2, 4), 1);     // oversubscribed node
  EXPECT_EQ(threads_for_rank(0, 8, 1), 1);
  EXPECT_GE(affinity_cpu_count(), 1);
}

}  // namespace
}  // namespace moert

namespace moert {
namespace {

// A thread the system refuses to start is an error naming it, and the workers already
// started are stopped (no std::terminate, no hang).
TEST(ThreadPool, RefusedThreadIsAnErrorNotACrash) {
  // Under qemu-user (cross builds) MOERT_MAX_THREADS caps pools at one thread: no worker starts.
  if (const char* cap = std::getenv("MOERT_MAX_THREADS"); cap != nullptr && std::atoi(cap) > 0 && std::atoi(cap) < 8) {
    GTEST_SKIP() << "MOERT_MAX_THREADS=" << cap << " caps the pool below the 8 threads this test starts";
  }
  int started = 0;
  auto flaky = [&](std::function<void()> body) {
    if (++started == 3) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    return std::thread(std::move(body));
  };
  try {
    ThreadPool pool(8, flaky);
    FAIL() << "the pool started although thread 3 was refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start worker thread 4 of 8"), std::string::npos) << e.what();
  }
  ThreadPool fine(3, [](std::function<void()> body) { return std::thread(std::move(body)); });
  std::atomic<int64_t> sum{0};
  fine.parallel_for(100, 1, [&](int64_t begin, int64_t end) { sum += end - begin; });
  EXPECT_EQ(sum.load(), 100);
}

}  // namespace
}  // namespace moert
