#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

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
  stopping_.store(true);
  work_.fetch_add(uint64_t{1} << 32);  // a new generation with no chunks wakes every worker
  work_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

namespace {

constexpr uint64_t pack_work(uint32_t generation, int num_chunks, int claimed) {
  return (uint64_t{generation} << 32) | (static_cast<uint64_t>(num_chunks) << 16) | static_cast<uint64_t>(claimed);
}
constexpr uint32_t generation_of(uint64_t work) { return static_cast<uint32_t>(work >> 32); }
constexpr int chunks_of(uint64_t work) { return static_cast<int>((work >> 16) & 0xFFFF); }
constexpr int claimed_of(uint64_t work) { return static_cast<int>(work & 0xFFFF); }

}  // namespace

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int num_chunks = static_cast<int>(std::min<int64_t>({num_threads(), max_chunks, 0xFFFF}));  // work_'s fields
  if (num_chunks == 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  task_ = &fn;
  task_n_ = n;
  chunk_size_ = (n + num_chunks - 1) / num_chunks;
  run_generation(num_chunks);
}

void ThreadPool::parallel_for_balanced(int64_t n, int64_t quantum, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  quantum = std::max<int64_t>(1, quantum);
  const int threads = num_threads();
  if (threads == 1 || n < threads * quantum) {
    parallel_for(n, quantum, fn);
    return;
  }
  if (shares_.size() != static_cast<size_t>(threads)) shares_.assign(static_cast<size_t>(threads), 1.0 / threads);
  bounds_.assign(static_cast<size_t>(threads) + 1, 0);
  double cumulative = 0;
  for (int c = 1; c < threads; ++c) {
    cumulative += shares_[static_cast<size_t>(c - 1)];
    const auto at = static_cast<int64_t>(cumulative * static_cast<double>(n)) / quantum * quantum;
    bounds_[static_cast<size_t>(c)] = std::clamp<int64_t>(at, bounds_[static_cast<size_t>(c - 1)], n);
  }
  bounds_.back() = n;
  runs_.assign(static_cast<size_t>(threads), ChunkRun{});
  task_ = &fn;
  task_n_ = n;
  try {
    run_generation(threads);
  } catch (...) {
    bounds_.clear();
    throw;
  }
  update_shares();
  bounds_.clear();
}

std::vector<double> ThreadPool::balanced_shares() const {
  if (shares_.empty()) return std::vector<double>(static_cast<size_t>(num_threads()), 1.0 / num_threads());
  return shares_;
}

// Calls shorter than this move the shares proportionally less: in a short call a worker's
// wake-up is a large part of its time, and a decode step's short jobs would otherwise pull the
// shares of its long ones away from balance (docs/perf/cpu-roofline.md, "Sixteenth session").
constexpr double kFullStepSeconds = 200e-6;

std::vector<double> balanced_shares_after(const std::vector<double>& shares, const std::vector<double>& units,
                                          const std::vector<double>& seconds) {
  const size_t slots = shares.size();
  std::vector<double> speed(slots);
  double total = 0;
  for (size_t s = 0; s < slots; ++s) {
    if (units[s] <= 0 || seconds[s] <= 0) return shares;
    speed[s] = units[s] / seconds[s];
    total += speed[s];
  }
  const double floor = 0.5 / static_cast<double>(slots);
  const double call_seconds = *std::max_element(seconds.begin(), seconds.end());
  const double step = 0.2 * std::min(1.0, call_seconds / kFullStepSeconds);
  std::vector<double> next(slots);
  double sum = 0;
  for (size_t s = 0; s < slots; ++s) {
    next[s] = std::max(floor, (1.0 - step) * shares[s] + step * speed[s] / total);
    sum += next[s];
  }
  for (double& share : next) share /= sum;
  return next;
}

// Each slot's units and the end of its last chunk in the call just done (so a worker that
// wakes late counts as slower: what is balanced is when the threads finish).
void ThreadPool::update_shares() {
  const size_t slots = shares_.size();
  std::vector<double> units(slots, 0.0), seconds(slots, 0.0);
  for (size_t c = 0; c + 1 < bounds_.size(); ++c) {
    const ChunkRun& run = runs_[c];
    if (run.slot < 0) return;
    units[static_cast<size_t>(run.slot)] += static_cast<double>(bounds_[c + 1] - bounds_[c]);
    seconds[static_cast<size_t>(run.slot)] = std::max(seconds[static_cast<size_t>(run.slot)], run.seconds);
  }
  shares_ = balanced_shares_after(shares_, units, seconds);
}

void ThreadPool::run_generation(int num_chunks) {
  error_ = nullptr;
  chunks_done_.store(0, std::memory_order_relaxed);
  if (!bounds_.empty()) published_ = std::chrono::steady_clock::now();
  work_.store(pack_work(++generation_, num_chunks, 0));  // releases everything above
  if (sleeping_workers_.load() > 0) work_.notify_all();
  run_chunks(generation_, 0);
  const auto all_done = [&] { return chunks_done_.load(std::memory_order_acquire) == num_chunks; };
  if (!spin_until(spin_ns_, all_done)) {
    for (;;) {
      caller_sleeping_.store(true);
      const int32_t done = chunks_done_.load();
      if (done == num_chunks) break;
      chunks_done_.wait(done);
    }
    caller_sleeping_.store(false);
  }
  task_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::run_chunks(uint32_t generation, int slot) {
  uint64_t work = work_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(work) != generation || claimed_of(work) >= chunks_of(work)) return;
    if (work_.compare_exchange_weak(work, work + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      run_chunk(claimed_of(work), chunks_of(work), slot);
      work = work_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::run_chunk(int64_t chunk, int num_chunks, int slot) {
  const bool balanced = !bounds_.empty();
  const int64_t begin = balanced ? bounds_[static_cast<size_t>(chunk)] : chunk * chunk_size_;
  const int64_t end = balanced ? bounds_[static_cast<size_t>(chunk) + 1] : std::min(task_n_, begin + chunk_size_);
  try {
    if (begin < end) (*task_)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  if (balanced) {
    runs_[static_cast<size_t>(chunk)] = {slot, std::chrono::duration<double>(std::chrono::steady_clock::now() - published_).count()};
  }
  // seq_cst with the caller's store to caller_sleeping_ before its last look at chunks_done_:
  // either it sees this chunk done or this thread sees it asleep and wakes it.
  if (chunks_done_.fetch_add(1) + 1 == num_chunks && caller_sleeping_.load()) chunks_done_.notify_one();
}

void ThreadPool::worker_loop(int worker_idx) {
  uint32_t seen_generation = 0;
  for (;;) {
    uint64_t work = 0;
    const auto new_generation = [&] {
      work = work_.load();
      return generation_of(work) != seen_generation;
    };
    if (!spin_until(spin_ns_, new_generation)) {
      // seq_cst with parallel_for's store of work_ before its look at sleeping_workers_.
      sleeping_workers_.fetch_add(1);
      while (!new_generation()) work_.wait(work);
      sleeping_workers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen_generation = generation_of(work);
    run_chunks(seen_generation, worker_idx + 1);
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
