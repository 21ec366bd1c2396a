// A small fixed thread pool for CPU kernels. parallel_for splits [0, n) into contiguous
// chunks whose boundaries depend only on n, the grain and the thread count, never on
// timing, so a kernel that writes disjoint outputs per index is deterministic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moert {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread, which also runs work.
  // Starts num_threads - 1 workers. When a worker cannot be started (the system refuses
  // threads), those already started are stopped and std::runtime_error says so: an error,
  // never a hang or std::terminate. `start_thread` (tests) replaces std::thread's constructor.
  using ThreadStarter = std::function<std::thread(std::function<void()>)>;
  explicit ThreadPool(int num_threads, const ThreadStarter& start_thread = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n), each at least `grain` long
  // (except possibly the last); returns when all are done. Not reentrant: fn must not
  // call parallel_for on the same pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int worker_idx);
  void stop_workers();  // joins every started worker
  void run_chunks(int64_t generation);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;
  int64_t task_n_ = 0;
  int64_t chunk_size_ = 0;
  int64_t num_chunks_ = 0;
  int64_t next_chunk_ = 0;
  int64_t chunks_finished_ = 0;
  std::atomic<int64_t> generation_{0};
  std::atomic<int64_t> chunks_done_{0};  // mirrors chunks_finished_ for lock-free spinning
  bool stopping_ = false;
  int64_t spin_ns_ = 0;
};

// How long an idle thread spins before sleeping, in microseconds: MOERT_SPIN_US (default
// 50; 0 = sleep at once, best when ranks outnumber cores). Spinning saves the futex
// round trip between the many short kernels of a decode step.
int64_t default_spin_us();

// Number of threads to use by default: MOERT_NUM_THREADS, else the hardware concurrency.
int default_num_threads();

// CPUs this process may run on (its affinity mask, as srun / mpirun binding sets it); the
// hardware concurrency where the mask cannot be read.
int affinity_cpu_count();
// Threads for one rank of `local_ranks` on a node of `machine_cpus` CPUs whose affinity mask
// holds `mask_cpus`: the mask when a launcher narrowed it, else an equal share of the
// machine (ranks sharing an unbound node split its cores instead of oversubscribing). >= 1.
int threads_for_rank(int mask_cpus, int machine_cpus, int local_ranks);
// Cap on every pool's threads: MOERT_MAX_THREADS (e.g. 1 where extra threads cannot run, as
// under the qemu-user of the aarch64 cross build: docs/environment.md), else no cap.
int max_threads();

}  // namespace moert
