// A watchdog for tests of code that must not block on a FIFO: opening a FIFO for reading
// waits until a writer appears, and reading it waits for data. Header-only, so any test can
// use it without linking the test-support library.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

namespace moert::testing {

// Runs fn on a thread and waits up to `seconds` for it. Returns true when it returned in time.
// Otherwise (fn is blocked on the FIFO at `fifo`, as a reader before a writer appears) opens
// the FIFO for writing and closes it, so the reader sees the end of the file and fn returns,
// and returns false: the test fails instead of hanging.
inline bool returns_without_blocking_on_fifo(const std::function<void()>& fn, const std::string& fifo,
                                             double seconds = 10.0) {
  std::packaged_task<void()> task(fn);
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  const bool in_time = done.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::ready;
  while (done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // unblocks the reader's open
    if (fd >= 0) ::close(fd);                                                 // and then its read (EOF)
  }
  runner.join();
  return in_time;
}

}  // namespace moert::testing
