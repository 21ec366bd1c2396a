// What the GPU benchmarks of the device check share (scripts/device-check.sh): exit on a CUDA
// error with its name, integer options, and the mean time of a call measured with events.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define MOERT_BENCH_CHECK_CUDA(call)                                       \
  do {                                                                     \
    const cudaError_t status = (call);                                     \
    if (status != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(status)); \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

namespace moert::gpu_bench {

// The value after `name` on the command line, else `fallback`.
inline long long int_arg(int argc, char** argv, const char* name, long long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

// Mean seconds of fn() over `repeats` calls after three warm-up calls, timed by events on the
// default stream (fn's work must be on it or finished when fn returns).
template <typename Fn>
double seconds_per_call(Fn&& fn, int repeats) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t start, stop;
  MOERT_BENCH_CHECK_CUDA(cudaEventCreate(&start));
  MOERT_BENCH_CHECK_CUDA(cudaEventCreate(&stop));
  MOERT_BENCH_CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < repeats; ++i) fn();
  MOERT_BENCH_CHECK_CUDA(cudaEventRecord(stop));
  MOERT_BENCH_CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0.0f;
  MOERT_BENCH_CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  MOERT_BENCH_CHECK_CUDA(cudaEventDestroy(start));
  MOERT_BENCH_CHECK_CUDA(cudaEventDestroy(stop));
  return ms / 1000.0 / repeats;
}

}  // namespace moert::gpu_bench
