#include "core/cpu/x86/dot_x86.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/cpu/prefetch.h"
#include "core/cpu/x86/reduce_lanes_x86.h"

namespace moert::cpu::x86 {
namespace {

using namespace dot_detail;

template <WeightKind kind>
constexpr int64_t kWeightBytes = kind == WeightKind::kF32 ? 4 : 2;

// Prefetches weight row w one tile of `rows_per_tile` rows of k elements ahead
// (core/cpu/prefetch.h), once per cache line the loop at element i consumes.
template <WeightKind kind>
inline void prefetch_row(const void* w, int64_t i, int64_t k, int rows_per_tile) {
  if ((i * kWeightBytes<kind>) % kCacheLineBytes == 0) {
    prefetch_weight_stream(static_cast<const char*>(w) + i * kWeightBytes<kind>, rows_per_tile * k * kWeightBytes<kind>);
  }
}

// ---- AVX-512 -----------------------------------------------------------------------------
template <WeightKind kind>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) inline __m512 load16_avx512(const void* w, int64_t i) {
  if constexpr (kind == WeightKind::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (kind == WeightKind::kBF16) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  } else {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i));
    return _mm512_cvtph_ps(raw);
  }
}

template <WeightKind kind, int rows>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) void dot_rows_avx512(const float* x, int64_t x_stride,
                                                                                  int64_t k, const void* w, float* out) {
  __m512 acc[rows];
  for (int r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    prefetch_row<kind>(w, i, k, 1);
    const __m512 wv = load16_avx512<kind>(w, i);
    for (int r = 0; r < rows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * x_stride + i), wv, acc[r]);
  }
  if (i == k) return reduce_lanes_avx512<rows>(acc, out);
  alignas(64) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    _mm512_store_ps(lanes, acc[r]);
    out[r] = reduce_with_tail<kind>(lanes, x + r * x_stride, w, i, k);
  }
}

// rows x cols accumulators: x rows against `cols` weight rows (w_rows[c]); out[r * cols + c].
template <WeightKind kind, int rows, int cols>
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) void dot_block_avx512(const float* x, int64_t x_stride,
                                                                                   int64_t k, const void* const* w_rows,
                                                                                   float* out) {
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    __m512 wv[cols];
    for (int c = 0; c < cols; ++c) {
      prefetch_row<kind>(w_rows[c], i, k, cols);
      wv[c] = load16_avx512<kind>(w_rows[c], i);
    }
    for (int r = 0; r < rows; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * x_stride + i);
      for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  if (i == k) return reduce_lanes_avx512<rows * cols>(&acc[0][0], out);
  alignas(64) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      _mm512_store_ps(lanes, acc[r][c]);
      out[r * cols + c] = reduce_with_tail<kind>(lanes, x + r * x_stride, w_rows[c], i, k);
    }
  }
}

// ---- AVX2 + FMA (lanes 0-7 and 8-15 in two registers) -------------------------------------
template <WeightKind kind>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_avx2(const void* w, int64_t i) {
  if constexpr (kind == WeightKind::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (kind == WeightKind::kBF16) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  }
}

template <WeightKind kind, int rows>
__attribute__((target("avx2,fma,f16c"))) void dot_rows_avx2(const float* x, int64_t x_stride, int64_t k, const void* w,
                                                            float* out) {
  __m256 lo[rows], hi[rows];
  for (int r = 0; r < rows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    prefetch_row<kind>(w, i, k, 1);
    const __m256 w_lo = load8_avx2<kind>(w, i);
    const __m256 w_hi = load8_avx2<kind>(w, i + 8);
    for (int r = 0; r < rows; ++r) {
      lo[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * x_stride + i), w_lo, lo[r]);
      hi[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * x_stride + i + 8), w_hi, hi[r]);
    }
  }
  if (i == k) return reduce_lanes_avx2<rows>(lo, hi, out);
  alignas(32) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    _mm256_store_ps(lanes, lo[r]);
    _mm256_store_ps(lanes + 8, hi[r]);
    out[r] = reduce_with_tail<kind>(lanes, x + r * x_stride, w, i, k);
  }
}

// out[r * cols + c] = the tree of accumulator r * cols + c (lanes 0-7 in lo, 8-15 in hi) after
// the tail elements [i_tail, k).
template <WeightKind kind, int rows, int cols>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void finish_avx2(const __m256* lo, const __m256* hi,
                                                                               const float* x, int64_t x_stride,
                                                                               int64_t i_tail, int64_t k,
                                                                               const void* const* w_rows, float* out) {
  constexpr int count = rows * cols;
  if (i_tail == k) {
    constexpr int first = count < 8 ? count : 8;  // reduce_lanes_avx2 takes up to 8 accumulators
    cpu::x86::reduce_lanes_avx2<first>(lo, hi, out);
    if constexpr (count > 8) cpu::x86::reduce_lanes_avx2<count - 8>(lo + 8, hi + 8, out + 8);
    return;
  }
  alignas(32) float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      _mm256_store_ps(lanes, lo[r * cols + c]);
      _mm256_store_ps(lanes + 8, hi[r * cols + c]);
      out[r * cols + c] = reduce_with_tail<kind>(lanes, x + r * x_stride, w_rows[c], i_tail, k);
    }
  }
}

// rows x cols accumulators of two registers each (lanes 0-7, 8-15): x rows against `cols`
// weight rows (w_rows[c]); out[r * cols + c]. One half of the lanes at a time keeps the
// weights of a half, one x register and 2 * rows * cols accumulators within the 16 registers.
// The single-row tile (batch-1 decode: eight independent FMA chains over one weight stream).
template <WeightKind kind, int rows, int cols>
__attribute__((target("avx2,fma,f16c"))) void dot_block_both_halves_avx2(const float* x, int64_t x_stride, int64_t k,
                                                                         const void* const* w_rows, float* out) {
  static_assert(2 * rows * cols + cols + 1 <= 16, "the tile must fit the 16 AVX2 registers");
  __m256 lo[rows * cols], hi[rows * cols];
  for (int a = 0; a < rows * cols; ++a) lo[a] = hi[a] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    __m256 wv[cols];
    for (int c = 0; c < cols; ++c) {
      prefetch_row<kind>(w_rows[c], i, k, cols);
      wv[c] = load8_avx2<kind>(w_rows[c], i);
    }
    for (int r = 0; r < rows; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * x_stride + i);
      for (int c = 0; c < cols; ++c) lo[r * cols + c] = _mm256_fmadd_ps(xv, wv[c], lo[r * cols + c]);
    }
    for (int c = 0; c < cols; ++c) wv[c] = load8_avx2<kind>(w_rows[c], i + 8);
    for (int r = 0; r < rows; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * x_stride + i + 8);
      for (int c = 0; c < cols; ++c) hi[r * cols + c] = _mm256_fmadd_ps(xv, wv[c], hi[r * cols + c]);
    }
  }
  finish_avx2<kind, rows, cols>(lo, hi, x, x_stride, i, k, w_rows, out);
}

// acc[r * cols + c] += x row r times weight row c in lanes `offset` .. `offset` + 7 (offset 0
// or 8) of the 16-element chunks starting in [begin, end), each lane summed in order.
template <WeightKind kind, int rows, int cols, bool prefetch>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void half_pass_avx2(const float* x, int64_t x_stride,
                                                                                  int64_t k, int64_t begin,
                                                                                  int64_t end, int64_t offset,
                                                                                  const void* const* w_rows,
                                                                                  __m256 (&sums)[rows * cols]) {
  __m256 acc[rows * cols];
  for (int a = 0; a < rows * cols; ++a) acc[a] = sums[a];
  for (int64_t i = begin + offset; i < end; i += kLanes) {
    __m256 wv[cols];
    for (int c = 0; c < cols; ++c) {
      if constexpr (prefetch) prefetch_row<kind>(w_rows[c], i, k, cols);
      wv[c] = load8_avx2<kind>(w_rows[c], i);
    }
    for (int r = 0; r < rows; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * x_stride + i);
      for (int c = 0; c < cols; ++c) acc[r * cols + c] = _mm256_fmadd_ps(xv, wv[c], acc[r * cols + c]);
    }
  }
  for (int a = 0; a < rows * cols; ++a) sums[a] = acc[a];
}

// Elements per block of the split tile: both passes over a block's weights and x (at K = 512,
// 3 KiB of BF16 weights and 8 KiB of x) before the next, so the second finds them in L1
// whatever K is (one pass per half over all of K = 4096 ran slower than the 2 x 3 tile).
constexpr int64_t kSplitBlock = 512;

// The GEMM tile: the same sums, per block of K lanes 0-7 of every chunk in a first pass and
// lanes 8-15 in a second (a lane's chain never meets another before the tree, so the order of
// the passes changes no bit). One register per accumulator leaves room for 4 x 3: two weight
// conversions per 8 FMAs, where a tile holding both halves fits only 2 x 3 (four per 8).
// docs/perf/cpu-roofline.md, fourteenth session.
template <WeightKind kind, int rows, int cols>
__attribute__((target("avx2,fma,f16c"))) void dot_block_split_halves_avx2(const float* x, int64_t x_stride, int64_t k,
                                                                          const void* const* w_rows, float* out) {
  static_assert(rows * cols + cols + 1 <= 16, "the tile must fit the 16 AVX2 registers");
  static_assert(kSplitBlock % kLanes == 0);
  const int64_t k_full = k / kLanes * kLanes;
  __m256 lo[rows * cols], hi[rows * cols];
  for (int a = 0; a < rows * cols; ++a) lo[a] = hi[a] = _mm256_setzero_ps();
  for (int64_t begin = 0; begin < k_full; begin += kSplitBlock) {
    const int64_t end = std::min(k_full, begin + kSplitBlock);
    half_pass_avx2<kind, rows, cols, true>(x, x_stride, k, begin, end, 0, w_rows, lo);
    half_pass_avx2<kind, rows, cols, false>(x, x_stride, k, begin, end, 8, w_rows, hi);
  }
  finish_avx2<kind, rows, cols>(lo, hi, x, x_stride, k_full, k, w_rows, out);
}

template <WeightKind kind>
void dot_rows_avx512_kind(const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (rows) {
    case 1: return dot_rows_avx512<kind, 1>(x, x_stride, k, w, out);
    case 2: return dot_rows_avx512<kind, 2>(x, x_stride, k, w, out);
    case 3: return dot_rows_avx512<kind, 3>(x, x_stride, k, w, out);
    default: return dot_rows_avx512<kind, 4>(x, x_stride, k, w, out);
  }
}

template <WeightKind kind>
void dot_rows_avx2_kind(const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (rows) {
    case 1: return dot_rows_avx2<kind, 1>(x, x_stride, k, w, out);
    case 2: return dot_rows_avx2<kind, 2>(x, x_stride, k, w, out);
    case 3: return dot_rows_avx2<kind, 3>(x, x_stride, k, w, out);
    default: return dot_rows_avx2<kind, 4>(x, x_stride, k, w, out);
  }
}

template <WeightKind kind>
void dot_block_avx512_kind(const float* x, int64_t x_stride, int rows, int64_t k, const void* const* w_rows,
                           float* out) {
  switch (rows) {
    case 1: return dot_block_avx512<kind, 1, kAvx512Tile.cols>(x, x_stride, k, w_rows, out);
    case 2: return dot_block_avx512<kind, 2, kAvx512Tile.cols>(x, x_stride, k, w_rows, out);
    case 3: return dot_block_avx512<kind, 3, kAvx512Tile.cols>(x, x_stride, k, w_rows, out);
    case 4: return dot_block_avx512<kind, 4, kAvx512Tile.cols>(x, x_stride, k, w_rows, out);
    case 5: return dot_block_avx512<kind, 5, kAvx512Tile.cols>(x, x_stride, k, w_rows, out);
    default: return dot_block_avx512<kind, 6, kAvx512Tile.cols>(x, x_stride, k, w_rows, out);
  }
}

template <WeightKind kind>
void dot_block_avx2_kind(const float* x, int64_t x_stride, int rows, int cols, int64_t k, const void* const* w_rows,
                         float* out) {
  static_assert(kAvx2Tile.rows == 4 && kAvx2SingleRowTile.rows == 1 && kAvx2SingleRowTile.cols != kAvx2Tile.cols);
  constexpr int kCols = kAvx2Tile.cols;
  if (cols == kAvx2SingleRowTile.cols) {
    return dot_block_both_halves_avx2<kind, 1, kAvx2SingleRowTile.cols>(x, x_stride, k, w_rows, out);
  }
  switch (rows) {
    case 1: return dot_block_split_halves_avx2<kind, 1, kCols>(x, x_stride, k, w_rows, out);
    case 2: return dot_block_split_halves_avx2<kind, 2, kCols>(x, x_stride, k, w_rows, out);
    case 3: return dot_block_split_halves_avx2<kind, 3, kCols>(x, x_stride, k, w_rows, out);
    default: return dot_block_split_halves_avx2<kind, 4, kCols>(x, x_stride, k, w_rows, out);
  }
}

}  // namespace

void dot_block_avx2(WeightKind kind, const float* x, int64_t x_stride, int rows, int cols, int64_t k,
                    const void* const* w_rows, float* out) {
  switch (kind) {
    case WeightKind::kF32: return dot_block_avx2_kind<WeightKind::kF32>(x, x_stride, rows, cols, k, w_rows, out);
    case WeightKind::kBF16: return dot_block_avx2_kind<WeightKind::kBF16>(x, x_stride, rows, cols, k, w_rows, out);
    case WeightKind::kF16: return dot_block_avx2_kind<WeightKind::kF16>(x, x_stride, rows, cols, k, w_rows, out);
  }
}

void dot_rows_avx512(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w,
                     float* out) {
  switch (kind) {
    case WeightKind::kF32: return dot_rows_avx512_kind<WeightKind::kF32>(x, x_stride, rows, k, w, out);
    case WeightKind::kBF16: return dot_rows_avx512_kind<WeightKind::kBF16>(x, x_stride, rows, k, w, out);
    case WeightKind::kF16: return dot_rows_avx512_kind<WeightKind::kF16>(x, x_stride, rows, k, w, out);
  }
}

void dot_rows_avx2(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (kind) {
    case WeightKind::kF32: return dot_rows_avx2_kind<WeightKind::kF32>(x, x_stride, rows, k, w, out);
    case WeightKind::kBF16: return dot_rows_avx2_kind<WeightKind::kBF16>(x, x_stride, rows, k, w, out);
    case WeightKind::kF16: return dot_rows_avx2_kind<WeightKind::kF16>(x, x_stride, rows, k, w, out);
  }
}

void dot_block_avx512(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k,
                      const void* const* w_rows, float* out) {
  switch (kind) {
    case WeightKind::kF32: return dot_block_avx512_kind<WeightKind::kF32>(x, x_stride, rows, k, w_rows, out);
    case WeightKind::kBF16: return dot_block_avx512_kind<WeightKind::kBF16>(x, x_stride, rows, k, w_rows, out);
    case WeightKind::kF16: return dot_block_avx512_kind<WeightKind::kF16>(x, x_stride, rows, k, w_rows, out);
  }
}

}  // namespace moert::cpu::x86
