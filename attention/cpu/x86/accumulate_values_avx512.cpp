#include "attention/cpu/x86/accumulate_values_avx512.h"

#include <immintrin.h>

#include <algorithm>

namespace moert::attention::x86 {
namespace {

#define MOERT_AVX512F __attribute__((target("avx512f")))

// Up to 16 / kChunks heads x kChunks 16-float chunks of the accumulators held in registers for
// all `count` value rows: each element still takes acc += p * v row by row in order (a
// multiply, then an add), only without a store and reload per row (the store-to-load chain
// through memory bounded the loop).
template <int kChunks>
MOERT_AVX512F void accumulate_block(const float* v, int64_t v_stride, int64_t count, const float* weights,
                                    int64_t weight_stride, int heads, int head_dim, float* acc) {
  constexpr int kMaxHeads = 16 / kChunks;
  __m512 a[kMaxHeads][kChunks];
  for (int g = 0; g < kMaxHeads; ++g) {
    if (g >= heads) break;
    for (int c = 0; c < kChunks; ++c) a[g][c] = _mm512_loadu_ps(acc + g * head_dim + 16 * c);
  }
  for (int64_t r = 0; r < count; ++r) {
    const float* v_row = v + r * v_stride;
    __m512 v_chunk[kChunks];
    for (int c = 0; c < kChunks; ++c) v_chunk[c] = _mm512_loadu_ps(v_row + 16 * c);
    for (int g = 0; g < kMaxHeads; ++g) {
      if (g >= heads) break;
      const __m512 p = _mm512_set1_ps(weights[g * weight_stride + r]);
      for (int c = 0; c < kChunks; ++c) a[g][c] = _mm512_add_ps(a[g][c], _mm512_mul_ps(p, v_chunk[c]));
    }
  }
  for (int g = 0; g < kMaxHeads; ++g) {
    if (g >= heads) break;
    for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + g * head_dim + 16 * c, a[g][c]);
  }
}

}  // namespace

MOERT_AVX512F void accumulate_values_avx512(const float* v, int64_t v_stride, int64_t count, const float* weights,
                                            int64_t weight_stride, int group, int head_dim, float* acc) {
  // Column blocks of up to 4 chunks (64 floats), head blocks of up to 16 / chunks heads.
  for (int d0 = 0; d0 < head_dim; d0 += 64) {
    const int chunks = std::min(4, (head_dim - d0) / 16);
    const int max_heads = 16 / chunks;
    for (int g0 = 0; g0 < group; g0 += max_heads) {
      const int heads = std::min(max_heads, group - g0);
      const float* w = weights + static_cast<int64_t>(g0) * weight_stride;
      float* a = acc + static_cast<int64_t>(g0) * head_dim + d0;
      switch (chunks) {
        case 4: accumulate_block<4>(v + d0, v_stride, count, w, weight_stride, heads, head_dim, a); break;
        case 3: accumulate_block<3>(v + d0, v_stride, count, w, weight_stride, heads, head_dim, a); break;
        case 2: accumulate_block<2>(v + d0, v_stride, count, w, weight_stride, heads, head_dim, a); break;
        default: accumulate_block<1>(v + d0, v_stride, count, w, weight_stride, heads, head_dim, a); break;
      }
    }
  }
}

}  // namespace moert::attention::x86
