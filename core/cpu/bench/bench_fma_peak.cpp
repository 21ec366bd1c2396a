// The machine's FMA peak: what the CPU's fused multiply-adds can do with nothing else in the way,
// the ceiling prefill and batched GEMMs are stated against (bench/vs_llama.sh,
// docs/perf/vs-llama.md). Every thread of a ThreadPool runs chains of vector FMAs on registers
// only: enough independent accumulators to cover the FMA latency on every pipe (AVX-512: 24 of
// the 32 registers; AVX2: 12 of the 16; NEON: 24 of the 32), no loads, no stores.
// Prints, for each SIMD path this CPU has up to the one the kernels take (core/cpu/isa.h; the
// MOERT_CPU_ISA cap applies), one line
//   fma_peak isa=avx2 active=1 threads=2 gflop_s=X per_thread_gflop_s=Y lanes=8 accumulators=12
// (best of the passes; a FLOP is one multiply or one add, so one FMA lane counts 2).
//   bench_fma_peak [threads=2] [passes=5] [millions of FMA instructions per thread and pass=200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/cpu/isa.h"
#include "core/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace {

// A kernel runs `iterations` rounds of `accumulators` independent FMAs (acc = acc * a + b, with
// a < 1 so the values settle near b / (1 - a): no overflow, no subnormals) and returns a sum of
// the accumulators so the work cannot be dropped.
struct Kernel {
  const char* isa;
  moert::cpu::CpuIsa level;
  int lanes;
  int accumulators;
  float (*run)(int64_t iterations);
};

#if defined(__x86_64__)
constexpr int kAvx512Acc = 24;
__attribute__((target("avx512f"), noinline)) float fma_avx512(int64_t iterations) {
  __m512 acc[kAvx512Acc];
  #pragma GCC unroll 32
  for (int i = 0; i < kAvx512Acc; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it) {
    #pragma GCC unroll 32
    for (int i = 0; i < kAvx512Acc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 sum = acc[0];
  #pragma GCC unroll 32
  for (int i = 1; i < kAvx512Acc; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}

constexpr int kAvx2Acc = 12;
__attribute__((target("avx2,fma"), noinline)) float fma_avx2(int64_t iterations) {
  __m256 acc[kAvx2Acc];
  #pragma GCC unroll 32
  for (int i = 0; i < kAvx2Acc; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iterations; ++it) {
    #pragma GCC unroll 32
    for (int i = 0; i < kAvx2Acc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 sum = acc[0];
  #pragma GCC unroll 32
  for (int i = 1; i < kAvx2Acc; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  return total;
}
#endif

#if defined(__aarch64__)
constexpr int kNeonAcc = 24;
__attribute__((noinline)) float fma_neon(int64_t iterations) {
  float32x4_t acc[kNeonAcc];
  #pragma GCC unroll 32
  for (int i = 0; i < kNeonAcc; ++i) acc[i] = vdupq_n_f32(static_cast<float>(i));
  const float32x4_t a = vdupq_n_f32(0.999f), b = vdupq_n_f32(0.001f);
  for (int64_t it = 0; it < iterations; ++it) {
    #pragma GCC unroll 32
    for (int i = 0; i < kNeonAcc; ++i) acc[i] = vfmaq_f32(b, acc[i], a);
  }
  float32x4_t sum = acc[0];
  #pragma GCC unroll 32
  for (int i = 1; i < kNeonAcc; ++i) sum = vaddq_f32(sum, acc[i]);
  return vaddvq_f32(sum);
}
#endif

// The SIMD paths compiled here, widest first.
std::vector<Kernel> kernels() {
  using moert::cpu::CpuIsa;
  std::vector<Kernel> all;
#if defined(__x86_64__)
  all.push_back({"avx512", CpuIsa::kAvx512, 16, kAvx512Acc, fma_avx512});
  all.push_back({"avx2", CpuIsa::kAvx2, 8, kAvx2Acc, fma_avx2});
#endif
#if defined(__aarch64__)
  all.push_back({"neon", CpuIsa::kNeon, 4, kNeonAcc, fma_neon});
#endif
  return all;
}

// True when `kernel` may run here: the active path is at least its level (x86: AVX-512 implies
// AVX2; NEON only on itself).
bool runs_here(const Kernel& kernel, moert::cpu::CpuIsa active) {
  using moert::cpu::CpuIsa;
  if (kernel.level == CpuIsa::kNeon || active == CpuIsa::kNeon) return kernel.level == active;
  return static_cast<int>(active) >= static_cast<int>(kernel.level);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int passes = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t millions = argc > 3 ? std::atoll(argv[3]) : 200;
  if (threads < 1 || passes < 1 || millions < 1) {
    std::fprintf(stderr, "usage: bench_fma_peak [threads >= 1] [passes >= 1] [millions of FMAs >= 1]\n");
    return 2;
  }
  const moert::cpu::CpuIsa active = moert::cpu::active_cpu_isa();
  moert::ThreadPool pool(threads);
  volatile float sink = 0.0f;
  bool any = false;
  for (const Kernel& kernel : kernels()) {
    if (!runs_here(kernel, active)) continue;
    any = true;
    const int64_t iterations = millions * 1000000 / kernel.accumulators;
    const double fmas = static_cast<double>(iterations) * kernel.accumulators;  // per thread
    double best = 0.0;
    for (int pass = 0; pass < passes; ++pass) {
      std::vector<float> results(static_cast<size_t>(threads), 0.0f);
      const auto start = std::chrono::steady_clock::now();
      pool.parallel_for(threads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) results[static_cast<size_t>(t)] = kernel.run(iterations);
      });
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      for (float r : results) sink = sink + r;
      best = std::max(best, threads * fmas * kernel.lanes * 2.0 / seconds / 1e9);
    }
    std::printf("fma_peak isa=%s active=%d threads=%d gflop_s=%.1f per_thread_gflop_s=%.1f lanes=%d accumulators=%d\n",
                kernel.isa, kernel.level == active ? 1 : 0, threads, best, best / threads, kernel.lanes,
                kernel.accumulators);
  }
  if (!any) {
    std::printf("fma_peak isa=%s active=1 threads=%d gflop_s=0 (no SIMD path on this CPU or build)\n",
                moert::cpu::cpu_isa_name(), threads);
  }
  return 0;
}
