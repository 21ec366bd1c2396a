// The peer watch over the loopback transport (ranks on threads, real TCP sockets between
// them): a rank that says goodbye is never reported, one that vanishes is, by rank 0, in one
// line naming its rank, pid and host.
#include "runtime/comm/peer_watch.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/comm/loopback.h"

namespace moert::comm {
namespace {

// Every line any rank reported lost, in order.
struct LostLines {
  std::mutex mutex;
  std::vector<std::string> lines;
  void add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  }
  std::vector<std::string> get() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines;
  }
};

PeerWatchOptions recording(LostLines* lost, double timeout_s) {
  PeerWatchOptions options;
  options.timeout_s = timeout_s;
  options.on_lost = [lost](const std::string& line) { lost->add(line); };
  return options;
}

TEST(PeerWatch, RanksThatSayGoodbyeAreNeverLost) {
  LostLines lost;
  const Status status = run_loopback(3, [&](Transport& transport) {
    Result<std::unique_ptr<PeerWatch>> watch = start_peer_watch(transport, recording(&lost, 0.4));
    ASSERT_TRUE(watch.is_ok()) << watch.status().to_string();
    ASSERT_NE(*watch, nullptr);
    EXPECT_EQ((*watch)->num_watched(), transport.rank() == 0 ? 2 : 1);
    // Rank 2 finishes first; the others go on for longer than the timeout.
    if (transport.rank() == 2) watch->reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    EXPECT_TRUE(transport.barrier().is_ok());
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_TRUE(lost.get().empty()) << lost.get().front();
}

TEST(PeerWatch, RankZeroNamesAVanishedRank) {
  LostLines lost;
  std::promise<void> reported;
  std::future<void> reported_future = reported.get_future();
  PeerWatchOptions options;
  options.timeout_s = 30.0;  // a closed connection is reported at once, not after the timeout
  options.on_lost = [&](const std::string& line) {
    lost.add(line);
    reported.set_value();
  };
  const Status status = run_loopback(3, [&](Transport& transport) {
    Result<std::unique_ptr<PeerWatch>> watch = start_peer_watch(transport, options);
    ASSERT_TRUE(watch.is_ok()) << watch.status().to_string();
    if (transport.rank() == 2) (*watch)->abandon();
    if (transport.rank() == 0) {
      EXPECT_EQ(reported_future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    }
    EXPECT_TRUE(transport.barrier().is_ok());
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  const std::vector<std::string> lines = lost.get();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("r0@"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("lost rank 2 (pid " + std::to_string(getpid()) + " on "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("without a goodbye"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find('\n'), std::string::npos) << lines[0];
}

TEST(PeerWatch, OffWithTimeZeroOrOneRank) {
  const Status status = run_loopback(2, [](Transport& transport) {
    PeerWatchOptions options;
    options.timeout_s = 0;
    Result<std::unique_ptr<PeerWatch>> watch = start_peer_watch(transport, options);
    ASSERT_TRUE(watch.is_ok());
    EXPECT_EQ(*watch, nullptr);
  });
  EXPECT_TRUE(status.is_ok()) << status.to_string();
  const Status one = run_loopback(1, [](Transport& transport) {
    Result<std::unique_ptr<PeerWatch>> watch = start_peer_watch(transport, PeerWatchOptions{});
    ASSERT_TRUE(watch.is_ok());
    EXPECT_EQ(*watch, nullptr);
  });
  EXPECT_TRUE(one.is_ok()) << one.to_string();
}

TEST(PeerWatch, TimeoutFromTheEnvironment) {
  setenv("MOERT_PEER_TIMEOUT_S", "2.5", 1);
  Result<PeerWatchOptions> options = peer_watch_options_from_env();
  ASSERT_TRUE(options.is_ok());
  EXPECT_EQ(options->timeout_s, 2.5);
  for (const char* bad : {"", "-1", "ten", "1e9", "nan"}) {
    setenv("MOERT_PEER_TIMEOUT_S", bad, 1);
    Result<PeerWatchOptions> refused = peer_watch_options_from_env();
    ASSERT_FALSE(refused.is_ok()) << bad;
    EXPECT_NE(refused.status().message().find(std::string("MOERT_PEER_TIMEOUT_S='") + bad + "'"), std::string::npos);
  }
  unsetenv("MOERT_PEER_TIMEOUT_S");
  EXPECT_EQ(peer_watch_options_from_env()->timeout_s, 10.0);
}

}  // namespace
}  // namespace moert::comm
