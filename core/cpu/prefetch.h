// Software prefetch of the weight streams of the GEMV/GEMM kernels (docs/perf/cpu-roofline.md,
// "Prefetch"). Batch-1 decode reads each weight byte once, a few rows at a time; the hardware
// prefetchers alone left the kernels at about half the machine's read bandwidth, a request
// kWeightPrefetchBytes ahead of every weight stream brings them close to it. A prefetch never
// faults and never changes a result: kernels may issue it past the end of a buffer.
#pragma once

#include <cstdint>

namespace moert::cpu {

// How far ahead of the element being read a weight stream is prefetched.
inline constexpr int64_t kWeightPrefetchBytes = 1024;
inline constexpr int64_t kCacheLineBytes = 64;

// Requests the cache line kWeightPrefetchBytes past p (address arithmetic on integers: the
// line may lie past the end of the buffer). Call once per kCacheLineBytes a stream consumes.
inline void prefetch_weight_stream(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kWeightPrefetchBytes), 0, 3);
}

}  // namespace moert::cpu
