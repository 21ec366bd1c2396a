// Software prefetch of the weight streams of the GEMV/GEMM kernels (docs/perf/cpu-roofline.md,
// "Prefetch"). Batch-1 decode reads each weight byte once; the hardware prefetchers alone left
// the kernels at about half the machine's read bandwidth.
//
// The kernels read a tile of `cols` consecutive weight rows position by position, and the rows
// of a matrix lie back to back, so the next tile call reads the next `cols` rows at the same
// positions: each stream is prefetched exactly one tile ahead (`ahead` = cols x the stream's
// bytes per row), so every tile but a thread's first arrives warm. A fixed distance inside the
// row (1 KiB before) left the start of every row of each new tile cold: with [1024, 1024] BF16
// matrices, half of each row. A prefetch never faults and never changes a result: kernels may
// issue it past the end of a buffer (the last tile's lands on other rows or nowhere).
#pragma once

#include <cstdint>

namespace moert::cpu {

inline constexpr int64_t kCacheLineBytes = 64;

// Requests the cache line `ahead` bytes past p (address arithmetic on integers: the line may
// lie past the end of the buffer). Call once per kCacheLineBytes a stream consumes.
inline void prefetch_weight_stream(const void* p, int64_t ahead) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(ahead)), 0, 3);
}

}  // namespace moert::cpu
