#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace moert {

namespace {

// Spins until done() or `spin_ns` passed; returns done().
template <typename Done>
bool spin_until(int64_t spin_ns, Done done) {
  if (spin_ns <= 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns);
  while (!done()) {
    for (int i = 0; i < 32; ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() > deadline) return done();
  }
  return true;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, const ThreadStarter& start_thread) : spin_ns_(default_spin_us() * 1000) {
  const int extra = std::min(std::max(1, num_threads), max_threads()) - 1;
  workers_.reserve(static_cast<size_t>(extra));
  for (int i = 0; i < extra; ++i) {
    try {
      std::function<void()> loop = [this, i] { worker_loop(i); };
      workers_.push_back(start_thread ? start_thread(std::move(loop)) : std::thread(std::move(loop)));
    } catch (const std::exception& e) {
      stop_workers();
      throw std::runtime_error("cannot start worker thread " + std::to_string(i + 2) + " of " +
                               std::to_string(extra + 1) + " (" + e.what() + "); lower --threads");
    }
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int64_t num_chunks = std::min<int64_t>(num_threads(), max_chunks);
  if (num_chunks == 1) {
    fn(0, n);
    return;
  }
  int64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &fn;
    task_n_ = n;
    num_chunks_ = num_chunks;
    chunk_size_ = (n + num_chunks - 1) / num_chunks;
    next_chunk_ = 0;
    chunks_finished_ = 0;
    chunks_done_.store(0);
    generation = ++generation_;
  }
  work_ready_.notify_all();
  run_chunks(generation);
  spin_until(spin_ns_, [&] { return chunks_done_.load(std::memory_order_acquire) == num_chunks; });
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [&] { return chunks_finished_ == num_chunks_; });
  task_ = nullptr;
}

void ThreadPool::run_chunks(int64_t generation) {
  for (;;) {
    int64_t begin, end;
    const std::function<void(int64_t, int64_t)>* task;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation != generation_ || task_ == nullptr || next_chunk_ >= num_chunks_) return;
      const int64_t chunk = next_chunk_++;
      begin = chunk * chunk_size_;
      end = std::min(task_n_, begin + chunk_size_);
      task = task_;
    }
    if (begin < end) (*task)(begin, end);
    bool all_done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all_done = ++chunks_finished_ == num_chunks_;
      chunks_done_.store(chunks_finished_, std::memory_order_release);
    }
    if (all_done) work_done_.notify_all();
  }
}

void ThreadPool::worker_loop(int /*worker_idx*/) {
  int64_t seen_generation = 0;
  for (;;) {
    int64_t generation;
    spin_until(spin_ns_, [&] { return generation_.load(std::memory_order_acquire) != seen_generation; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      generation = seen_generation = generation_;
    }
    run_chunks(generation);
  }
}

int64_t default_spin_us() {
  if (const char* text = std::getenv("MOERT_SPIN_US")) {
    const long parsed = std::atol(text);
    if (parsed >= 0) return parsed;
  }
  return 50;
}

int max_threads() {
  if (const char* text = std::getenv("MOERT_MAX_THREADS")) {
    const int parsed = std::atoi(text);
    if (parsed > 0) return parsed;
  }
  return 1 << 20;
}

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, CPU_COUNT(&set));
}

int threads_for_rank(int mask_cpus, int machine_cpus, int local_ranks) {
  if (mask_cpus < machine_cpus) return std::max(1, mask_cpus);
  return std::max(1, machine_cpus / std::max(1, local_ranks));
}

int default_num_threads() {
  if (const char* text = std::getenv("MOERT_NUM_THREADS")) {
    const int parsed = std::atoi(text);
    if (parsed > 0) return parsed;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace moert
