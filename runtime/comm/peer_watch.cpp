#include "runtime/comm/peer_watch.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/log.h"

namespace moert::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kHeartbeat = 'h';
constexpr char kGoodbye = 'b';
constexpr char kEnding = 'e';   // "I am ending the job over a lost peer": not a loss of the sender
constexpr char kAbandon = 'x';  // on the wake pipe only: stop without a goodbye
constexpr double kConnectTimeoutS = 5.0;  // a peer connecting to rank 0 at start
constexpr double kAcceptTimeoutS = 10.0;  // rank 0 waiting for every hello
constexpr size_t kMaxHostBytes = 255;

// What rank 0 broadcasts at start: where to connect and the job's timeout.
struct Announcement {
  char host[kMaxHostBytes + 1] = {0};
  int32_t port = 0;
  int32_t timeout_ms = 0;  // 0: the watch is off
  int64_t pid = 0;
};

std::string this_host() {
  const std::string& host = process_identity().host;
  if (!host.empty()) return host;
  char name[kMaxHostBytes + 1] = {0};
  if (gethostname(name, kMaxHostBytes) != 0) return "localhost";
  return name;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A listening socket on every address of this host (IPv6 with IPv4 mapped, else IPv4), on a
// port the kernel picks. Returns -1 when neither can be had.
int listen_any(int backlog, int* port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, backlog) != 0) {
      close(fd);
      fd = -1;
    }
  }
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, backlog) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

// Waits for fd to become readable (or writable) until `deadline`; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// A connected, non-blocking socket to host:port, or -1 (`why` says what failed).
int connect_to(const std::string& host, int port, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    *why = "cannot resolve " + host + ": " + gai_strerror(rc);
    return -1;
  }
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(kConnectTimeoutS * 1000));
  int fd = -1;
  *why = "no address of " + host;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int error = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS && wait_fd(fd, POLLOUT, deadline)) {
        socklen_t length = sizeof(error);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      } else if (error == EINPROGRESS) {
        error = ETIMEDOUT;
      }
    }
    if (error != 0) {
      *why = "cannot connect to " + host + " port " + std::to_string(port) + ": " + std::strerror(error);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Reads one '\n'-terminated line (without it) until `deadline`.
bool read_line(int fd, std::string* line, Clock::time_point deadline) {
  line->clear();
  for (;;) {
    char c = 0;
    const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    if (n == 1) {
      if (c == '\n') return true;
      if (line->size() > 2 * kMaxHostBytes) return false;
      line->push_back(c);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_fd(fd, POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
}

struct Peer {
  int fd = -1;
  int rank = 0;
  long pid = 0;
  std::string host;
  bool goodbye = false;
  Clock::time_point last_heard;
};

void default_on_lost(const std::string& line, bool silent, double timeout_s) {
  const std::string whole = line + "\n";
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, whole.data(), whole.size());
  // A silent peer is usually an unreachable node. A launcher told to end the job now would try
  // to reach that node's daemon and wait for it (Open MPI 4.1's mpirun then waits for TCP to give
  // up: minutes); given the time to notice the node itself (mpirun with oob_tcp_keepalive_*), it
  // ends the job without it. So wait another timeout (at most 30 s) before leaving.
  if (silent) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(timeout_s, 30.0)));
  std::_Exit(1);
}

class PeerWatchImpl final : public PeerWatch {
 public:
  PeerWatchImpl(std::vector<Peer> peers, double timeout_s, int rank, std::function<void(const std::string&)> on_lost)
      : peers_(std::move(peers)), timeout_s_(timeout_s), rank_(rank), on_lost_(std::move(on_lost)) {
    if (pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
    for (Peer& peer : peers_) peer.last_heard = Clock::now();
    thread_ = std::thread([this] { loop(); });
  }

  ~PeerWatchImpl() override {
    stop(kGoodbye);
    for (int fd : wake_) {
      if (fd >= 0) close(fd);
    }
  }

  int num_watched() const override { return static_cast<int>(peers_.size()); }
  void abandon() override { stop(kAbandon); }

 private:
  // Ends the thread; it says goodbye first unless `how` is kAbandon.
  void stop(char how) {
    if (!thread_.joinable()) return;
    if (wake_[1] >= 0) {
      [[maybe_unused]] const ssize_t written = ::write(wake_[1], &how, 1);
    }
    thread_.join();
  }

  void loop() {
    const double interval_s = std::min(0.5, timeout_s_ / 8.0);
    const int interval_ms = std::max(1, static_cast<int>(interval_s * 1000));
    Clock::time_point last_sent = Clock::now() - std::chrono::hours(1);
    std::vector<pollfd> fds;
    for (;;) {
      const Clock::time_point now = Clock::now();
      if (seconds_since(last_sent) >= interval_s) {
        for (Peer& peer : peers_) {
          if (peer.fd >= 0) (void)send(peer.fd, &kHeartbeat, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        last_sent = now;
      }
      fds.clear();
      fds.push_back(pollfd{wake_[0], POLLIN, 0});
      for (const Peer& peer : peers_) fds.push_back(pollfd{peer.fd, POLLIN, 0});  // fd -1: ignored by poll
      const int rc = poll(fds.data(), fds.size(), interval_ms);
      if (rc < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) {  // the owner is done: goodbye to everyone (unless abandoning)
        char how = kGoodbye;
        if (::read(wake_[0], &how, 1) != 1) how = kGoodbye;
        for (Peer& peer : peers_) {
          if (peer.fd >= 0) {
            if (how == kGoodbye) (void)send(peer.fd, &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            close(peer.fd);
            peer.fd = -1;
          }
        }
        return;
      }
      for (size_t i = 0; i < peers_.size(); ++i) {
        Peer& peer = peers_[i];
        if (peer.fd < 0 || fds[i + 1].revents == 0) continue;
        char bytes[64];
        const ssize_t n = recv(peer.fd, bytes, sizeof(bytes), MSG_DONTWAIT);
        if (n > 0) {
          peer.last_heard = Clock::now();
          if (std::memchr(bytes, kGoodbye, static_cast<size_t>(n)) != nullptr ||
              std::memchr(bytes, kEnding, static_cast<size_t>(n)) != nullptr) {
            peer.goodbye = true;
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          const std::string cause = n == 0 ? std::string("its connection closed")
                                           : std::string("its connection failed (") + std::strerror(errno) + ")";
          close(peer.fd);
          peer.fd = -1;
          if (!peer.goodbye) return lost(peer, cause + " without a goodbye: its process ended or was killed", false);
        }
      }
      for (Peer& peer : peers_) {
        if (peer.fd < 0 || peer.goodbye) continue;
        const double silent_s = seconds_since(peer.last_heard);
        if (silent_s > timeout_s_) {
          char cause[160];
          std::snprintf(cause, sizeof(cause),
                        "nothing heard from it for %.1f s: its node or link is down, or the process is stopped",
                        silent_s);
          return lost(peer, cause, true);
        }
      }
    }
  }

  void lost(const Peer& peer, const std::string& cause, bool silent) {
    // The others are not to report this rank lost when it ends: it is the messenger.
    for (Peer& other : peers_) {
      if (other.fd >= 0 && &other != &peer) (void)send(other.fd, &kEnding, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    const std::string line = "[moert r" + std::to_string(rank_) + "@" + this_host() + " error] lost rank " +
                             std::to_string(peer.rank) + " (pid " + std::to_string(peer.pid) + " on " + peer.host +
                             "): " + cause + "; ending the job (results written so far are kept: finish it with "
                             "`moert run --resume` on the nodes that remain)";
    if (on_lost_) {
      on_lost_(line);
    } else {
      default_on_lost(line, silent, timeout_s_);
    }
  }

  std::vector<Peer> peers_;
  double timeout_s_;
  int rank_;
  std::function<void(const std::string&)> on_lost_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

// All ranks learn the lowest rank whose step failed (world size when none).
Result<int> first_failing_rank(Transport& transport, bool ok) {
  int64_t first = ok ? 0 : transport.world_size() - transport.rank();
  MOERT_RETURN_IF_ERROR(transport.all_reduce(&first, 1, ReduceOp::kMax));
  return first == 0 ? transport.world_size() : transport.world_size() - static_cast<int>(first);
}

}  // namespace

Result<PeerWatchOptions> peer_watch_options_from_env() {
  PeerWatchOptions options;
  if (const char* text = std::getenv("MOERT_PEER_TIMEOUT_S")) {
    char* end = nullptr;
    const double value = std::strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !std::isfinite(value) || value < 0 || value > 86400) {
      return invalid_argument(std::string("MOERT_PEER_TIMEOUT_S='") + text +
                              "' must be seconds in [0, 86400] (0 turns the peer watch off)");
    }
    options.timeout_s = value;
  }
  return options;
}

Result<std::unique_ptr<PeerWatch>> start_peer_watch(Transport& transport, const PeerWatchOptions& options) {
  const int rank = transport.rank();
  const int world = transport.world_size();
  if (world < 2) return std::unique_ptr<PeerWatch>();

  // Rank 0 listens and says where; its timeout holds for every rank.
  Announcement announcement;
  int listener = -1;
  if (rank == 0 && options.timeout_s > 0) {
    int port = 0;
    listener = listen_any(std::max(world, 128), &port);
    if (listener >= 0) {
      std::snprintf(announcement.host, sizeof(announcement.host), "%s", this_host().c_str());
      announcement.port = port;
      announcement.timeout_ms = std::max(1, static_cast<int>(options.timeout_s * 1000));
      announcement.pid = getpid();
    } else {
      MOERT_WARN("peer watch off: cannot listen on a TCP port: " << std::strerror(errno));
    }
  }
  MOERT_RETURN_IF_ERROR(transport.broadcast(&announcement, sizeof(announcement), 0));
  if (announcement.timeout_ms == 0) return std::unique_ptr<PeerWatch>();
  announcement.host[kMaxHostBytes] = '\0';
  const double timeout_s = announcement.timeout_ms / 1000.0;

  // Every other rank connects and introduces itself ("rank pid host\n"); the kernel queues the
  // connections until rank 0 accepts them.
  std::vector<Peer> peers;
  std::string why;
  if (rank != 0) {
    Peer root;
    root.rank = 0;
    root.host = announcement.host;
    root.pid = static_cast<long>(announcement.pid);
    // A rank on rank 0's own host connects over loopback: what its hostname resolves to is
    // the network's business (a host's name may map to an external address), the watch's
    // traffic never needs to leave the host.
    const std::string address = root.host == this_host() ? std::string("127.0.0.1") : root.host;
    root.fd = connect_to(address, announcement.port, &why);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(static_cast<int>(kConnectTimeoutS));
    if (root.fd >= 0 && !send_all(root.fd, std::to_string(rank) + " " + std::to_string(getpid()) + " " + this_host() + "\n",
                                  deadline)) {
      why = "cannot send to " + root.host;
      close(root.fd);
      root.fd = -1;
    }
    if (root.fd >= 0) peers.push_back(std::move(root));
  }
  MOERT_ASSIGN_OR_RETURN(const int unreachable_from, first_failing_rank(transport, rank == 0 || !peers.empty()));
  if (unreachable_from < world) {
    if (rank == unreachable_from) MOERT_WARN("peer watch off: " << why);
    if (rank == 0) MOERT_WARN("peer watch off: rank " << unreachable_from << " cannot reach rank 0 (its warning says why)");
    for (Peer& peer : peers) close(peer.fd);
    if (listener >= 0) close(listener);
    return std::unique_ptr<PeerWatch>();
  }

  bool accepted_all = true;
  if (rank == 0) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(kAcceptTimeoutS * 1000));
    std::vector<bool> seen(static_cast<size_t>(world), false);
    while (static_cast<int>(peers.size()) < world - 1 && accepted_all) {
      accepted_all = wait_fd(listener, POLLIN, deadline);
      if (!accepted_all) break;
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;
      std::string hello;
      Peer peer;
      peer.fd = fd;
      char host[kMaxHostBytes + 1] = {0};
      if (!read_line(fd, &hello, deadline) ||
          std::sscanf(hello.c_str(), "%d %ld %255s", &peer.rank, &peer.pid, host) != 3 || peer.rank < 1 ||
          peer.rank >= world || seen[static_cast<size_t>(peer.rank)]) {
        close(fd);  // not one of ours: keep waiting for the ranks
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      seen[static_cast<size_t>(peer.rank)] = true;
      peer.host = host;
      peers.push_back(std::move(peer));
    }
    close(listener);
    if (!accepted_all) {
      MOERT_WARN("peer watch off: " << peers.size() << " of " << world - 1 << " ranks introduced themselves within "
                                    << kAcceptTimeoutS << " s");
    }
    std::sort(peers.begin(), peers.end(), [](const Peer& a, const Peer& b) { return a.rank < b.rank; });
  }
  MOERT_ASSIGN_OR_RETURN(const int failed, first_failing_rank(transport, accepted_all));
  if (failed < world) {
    for (Peer& peer : peers) close(peer.fd);
    return std::unique_ptr<PeerWatch>();
  }
  return std::unique_ptr<PeerWatch>(std::make_unique<PeerWatchImpl>(std::move(peers), timeout_s, rank, options.on_lost));
}

}  // namespace moert::comm
