// A small fixed thread pool for CPU kernels. parallel_for splits [0, n) into contiguous
// chunks whose boundaries depend only on n, the grain and the thread count, never on
// timing, so a kernel that writes disjoint outputs per index is deterministic.
// parallel_for_balanced sizes its chunks by the threads' measured speeds instead: only for
// work whose every index comes out the same whichever thread computes it and wherever the
// chunks end (the linear layers: docs/architecture.md "Threads").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
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
  // call parallel_for on the same pool. An exception from fn (on any thread) is rethrown
  // here once every range has finished (the first one; later ones are dropped).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn(begin, end) once per thread on contiguous ranges covering [0, n), sized by each
  // thread's share: an average over earlier calls of its speed (indices per second from the
  // call's start to the end of its range, so waking late counts as slow) relative to the
  // others', so a thread on a slower core takes less and the threads finish together (a VM's
  // vCPUs need not run at one speed: docs/architecture.md "Threads"). Boundaries are multiples of
  // `quantum` (and n). The ranges depend on timing: fn must give every index the same result
  // whichever range holds it. Exceptions as parallel_for; not reentrant either.
  void parallel_for_balanced(int64_t n, int64_t quantum, const std::function<void(int64_t, int64_t)>& fn);
  // The current shares (slot 0 the calling thread, slot i + 1 worker i), summing to 1.
  std::vector<double> balanced_shares() const;

 private:
  void worker_loop(int worker_idx);
  void stop_workers();  // joins every started worker
  // Publishes a generation of num_chunks chunks of task_, runs chunks on the calling thread
  // and returns when all are done (rethrowing the first exception).
  void run_generation(int num_chunks);
  void run_chunks(uint32_t generation, int slot);
  void run_chunk(int64_t chunk, int num_chunks, int slot);
  void update_shares();

  // The hand-off is lock-free (one compare-exchange per chunk; threads sleep in futex waits
  // only after spinning spin_ns_). `work_` packs the generation (bits 32-63),
  // the generation's chunk count (16-31) and the chunks claimed so far (0-15); a thread
  // claims a chunk by a compare-exchange of the whole word, so a late worker can never claim
  // a chunk of a generation it has not seen, and reads task_, task_n_ and chunk_size_ only
  // while it holds a chunk (parallel_for rewrites them only after every chunk is done).
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;
  int64_t task_n_ = 0;
  int64_t chunk_size_ = 0;
  uint32_t generation_ = 0;                 // parallel_for's own count
  std::atomic<uint64_t> work_{0};
  std::atomic<int32_t> chunks_done_{0};
  std::atomic<int32_t> sleeping_workers_{0};  // blocked in work_.wait(): parallel_for notifies
  std::atomic<bool> caller_sleeping_{false};  // blocked in chunks_done_.wait(): the last chunk notifies
  std::atomic<bool> stopping_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first exception of this parallel_for
  int64_t spin_ns_ = 0;
  // parallel_for_balanced: the shares of the thread slots; the current call's chunk bounds
  // (bounds_[c], bounds_[c + 1]; empty in parallel_for), when it was published, and who ran
  // each chunk and when it ended, in seconds after published_ (written by that chunk's thread
  // before it counts the chunk done).
  struct ChunkRun {
    int slot = -1;
    double seconds = 0;
  };
  std::chrono::steady_clock::time_point published_;
  std::vector<double> shares_;
  std::vector<int64_t> bounds_;
  std::vector<ChunkRun> runs_;
};

// The shares after one parallel_for_balanced call in which slot s ran units[s] indices and
// finished seconds[s] after the call's start: when every slot ran some, they move toward the
// slots' speeds (units / seconds) in proportion, a fifth of the way for a call of 200 us or
// more and proportionally less for a shorter one (an average over the last calls, weighted by
// their length). No share drops below half an equal one, so every thread keeps running and
// being measured; the result sums to 1. Unchanged when a slot ran nothing.
std::vector<double> balanced_shares_after(const std::vector<double>& shares, const std::vector<double>& units,
                                          const std::vector<double>& seconds);

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
