// The machine's streaming read bandwidth, the roofline of batch-1 decode (bench/cpu_roofline.sh,
// docs/perf/cpu-roofline.md): every thread of a ThreadPool sums its slice of a buffer much
// larger than the caches, with independent accumulators so the loads, not the adds, limit it.
// Prints "read_bandwidth_gb_s=X" (best of the passes; GB = 1e9 bytes).
//   bench_read_bandwidth [threads=2] [mib=1024] [passes=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/thread_pool.h"

namespace {

// Eight running sums over 64-byte strides: the compiler vectorises the inner loop.
float sum_slice(const float* data, int64_t count) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    for (int k = 0; k < 16; ++k) lanes[k] += data[i + k];
  }
  float total = 0.0f;
  for (int k = 0; k < 16; ++k) total += lanes[k];
  for (; i < count; ++i) total += data[i];
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int64_t mib = argc > 2 ? std::atoll(argv[2]) : 1024;
  const int passes = argc > 3 ? std::atoi(argv[3]) : 5;
  if (threads < 1 || mib < 1 || passes < 1) {
    std::fprintf(stderr, "usage: bench_read_bandwidth [threads >= 1] [mib >= 1] [passes >= 1]\n");
    return 2;
  }
  const int64_t count = mib * (int64_t{1} << 20) / static_cast<int64_t>(sizeof(float));
  std::vector<float> data(static_cast<size_t>(count));
  moert::ThreadPool pool(threads);
  // First touch from the pool's threads, so pages sit where they are read.
  const int64_t grain = std::max<int64_t>(1, count / threads);
  pool.parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) data[static_cast<size_t>(i)] = static_cast<float>(i & 7) * 0.125f;
  });
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<float> partial(static_cast<size_t>(count / grain) + 1, 0.0f);  // one slot per chunk (chunks >= grain)
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(count, grain, [&](int64_t begin, int64_t end) {
      const float s = sum_slice(data.data() + begin, end - begin);
      partial[static_cast<size_t>(begin / grain)] += s;
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (float p : partial) sink = sink + p;
    best = std::max(best, static_cast<double>(count) * sizeof(float) / seconds / 1e9);
  }
  std::printf("read_bandwidth_gb_s=%.2f threads=%d mib=%lld passes=%d\n", best, threads, static_cast<long long>(mib),
              passes);
  return 0;
}
