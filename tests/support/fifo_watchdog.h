// A watchdog for tests of code that must not block on a FIFO: opening a FIFO for reading
// waits until a writer appears, and reading it waits for data. Header-only, so any test can
// use it without linking the test-support library. It starts no thread (a timer signal does
// the watching), so it also runs under qemu-user, where guest threads hang (docs/environment.md).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <string>

namespace moert::testing {

namespace fifo_watchdog_detail {
inline const char* watched_fifo = nullptr;
inline volatile sig_atomic_t fired = 0;
// Async-signal-safe: opening the FIFO for writing (and closing it) unblocks a reader waiting
// in open(), and its read then sees the end of the file.
inline void on_timer(int /*signal*/) {
  fired = 1;
  const int fd = ::open(watched_fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
}
}  // namespace fifo_watchdog_detail

// Runs fn on this thread. Returns true when it returned within `seconds`. Otherwise (fn is
// blocked on the FIFO at `fifo`, as a reader before a writer appears) a timer opens the FIFO
// for writing and closes it, every 100 ms from then on, so the reader sees the end of the file
// (or its call is interrupted) and fn returns, and this returns false: the test fails instead
// of hanging.
inline bool returns_without_blocking_on_fifo(const std::function<void()>& fn, const std::string& fifo,
                                             double seconds = 10.0) {
  namespace detail = fifo_watchdog_detail;
  detail::watched_fifo = fifo.c_str();
  detail::fired = 0;
  struct sigaction action = {}, previous = {};
  action.sa_handler = detail::on_timer;
  sigemptyset(&action.sa_mask);  // no SA_RESTART: a blocked open or read returns
  ::sigaction(SIGALRM, &action, &previous);
  itimerval timer = {};
  const double whole = std::floor(seconds);
  timer.it_value.tv_sec = static_cast<time_t>(whole);
  timer.it_value.tv_usec = static_cast<suseconds_t>((seconds - whole) * 1e6);
  timer.it_interval.tv_usec = 100000;
  ::setitimer(ITIMER_REAL, &timer, nullptr);
  fn();
  const itimerval off = {};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  ::sigaction(SIGALRM, &previous, nullptr);
  return detail::fired == 0;
}

}  // namespace moert::testing
