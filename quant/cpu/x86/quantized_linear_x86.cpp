#include "quant/cpu/x86/quantized_linear_x86.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "core/cpu/x86/reduce_lanes_x86.h"
#include "quant/cpu/quantized_linear_tiles.h"
#include "quant/cpu/x86/fp8_decode_x86.h"

namespace moert::quant::x86 {
namespace {

using namespace qlinear_detail;

// ---- AVX-512 -----------------------------------------------------------------------------------
// FP4: one 16-element group is 8 bytes = 16 nibbles. Broadcast to the 8 qwords and shifted
// right by 4q, qword q holds nibble q in its low dword and nibble 8+q in its high dword, and
// vpermps reads only the low 4 bits of each index: so register lane 2q <-> element q,
// 2q+1 <-> element 8+q. x is permuted the same way (kFp4PermAvx512), so each register lane
// is one canonical lane.
constexpr int kFp4PermAvx512[kLanes] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};


MOERT_AVX512 inline __m512i fp4_codes_avx512(const uint8_t* p, __m512i shifts) {
  return _mm512_srlv_epi64(_mm512_set1_epi64(static_cast<long long>(load_u64(p))), shifts);
}

MOERT_AVX512 inline __m512i fp4_shifts_avx512() { return _mm512_set_epi64(28, 24, 20, 16, 12, 8, 4, 0); }
MOERT_AVX512 inline __m512i fp4_x_perm_avx512() {
  return _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
}

template <int rows, int cols, typename WeightAtC>
MOERT_AVX512 void finish_avx512(__m512 (&acc)[rows][cols], const int* perm, const float* x, int64_t x_stride,
                                int64_t i_tail, int64_t k, WeightAtC weight_at_c, float* out) {
  static_assert(rows * cols <= 16);
  if (i_tail == k) {  // no tail: register lanes back to canonical order, then all trees at once
    alignas(64) int from[kLanes];
    for (int j = 0; j < kLanes; ++j) from[perm[j]] = j;
    const __m512i canonical = _mm512_load_si512(from);
    __m512 lanes[rows * cols];
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) lanes[r * cols + c] = _mm512_permutexvar_ps(canonical, acc[r][c]);
    }
    return cpu::x86::reduce_lanes_avx512<rows * cols>(lanes, out);
  }
  alignas(64) float reg[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      _mm512_store_ps(reg, acc[r][c]);
      out[r * cols + c] = finish(reg, perm, x + r * x_stride, i_tail, k, [&](int64_t i) { return weight_at_c(c, i); });
    }
  }
}

// NVFP4 block scales e4m3 * global for a chunk of K, decoded 16 at a time into a stack buffer.
constexpr int64_t kNvfp4Chunk = 1024;  // K elements per scale chunk
constexpr int64_t kNvfp4ChunkBlocks = kNvfp4Chunk / kNvfp4BlockSize;



template <int rows, int cols>
MOERT_AVX512 void nvfp4_tile_avx512(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const __m512 table = _mm512_loadu_ps(kE2m1Values.data());
  const __m512i shifts = fp4_shifts_avx512();
  const __m512i x_perm = fp4_x_perm_avx512();
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  alignas(64) float scale[cols][kNvfp4ChunkBlocks];
  for (int64_t k0 = 0; k0 < k; k0 += kNvfp4Chunk) {
    const int64_t num_blocks = (std::min(k, k0 + kNvfp4Chunk) - k0) / kNvfp4BlockSize;
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].scales, k0 / kNvfp4BlockSize, cols, k / kNvfp4BlockSize);
      nvfp4_scales_avx512(w[c].scales + k0 / kNvfp4BlockSize, num_blocks, w[c].global_scale, scale[c]);
    }
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t i = k0 + b * kNvfp4BlockSize;
      __m512 wv[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
        // table[code] * scale: the codec's e2m1 * (e4m3 * global), one rounding.
        const __m512 scaled = _mm512_mul_ps(table, _mm512_set1_ps(scale[c][b]));
        wv[c] = _mm512_permutexvar_ps(fp4_codes_avx512(w[c].data + i / 2, shifts), scaled);
      }
      for (int r = 0; r < rows; ++r) {
        const __m512 xv = _mm512_permutexvar_ps(x_perm, _mm512_loadu_ps(x + r * x_stride + i));
        for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    }
  }
  finish_avx512<rows, cols>(acc, kFp4PermAvx512, x, x_stride, k, k,
                            [&](int c, int64_t i) { return weight_at<WeightFormat::kNvfp4>(w[c], i); }, out);
}

template <int rows, int cols>
MOERT_AVX512 void mxfp4_tile_avx512(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const __m512 table = _mm512_loadu_ps(kE2m1Values.data());
  const __m512i shifts = fp4_shifts_avx512();
  const __m512i x_perm = fp4_x_perm_avx512();
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k; i += kMxfp4BlockSize) {
    __m512 w0[cols], w1[cols];
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
      prefetch_stream_at(w[c].scales, i / kMxfp4BlockSize, cols, k / kMxfp4BlockSize);
      const __m512 scaled = _mm512_mul_ps(table, _mm512_set1_ps(e8m0_decode(w[c].scales[i / kMxfp4BlockSize])));
      w0[c] = _mm512_permutexvar_ps(fp4_codes_avx512(w[c].data + i / 2, shifts), scaled);
      w1[c] = _mm512_permutexvar_ps(fp4_codes_avx512(w[c].data + i / 2 + 8, shifts), scaled);
    }
    for (int r = 0; r < rows; ++r) {
      const __m512 x0 = _mm512_permutexvar_ps(x_perm, _mm512_loadu_ps(x + r * x_stride + i));
      const __m512 x1 = _mm512_permutexvar_ps(x_perm, _mm512_loadu_ps(x + r * x_stride + i + 16));
      for (int c = 0; c < cols; ++c) {
        acc[r][c] = _mm512_fmadd_ps(x0, w0[c], acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(x1, w1[c], acc[r][c]);
      }
    }
  }
  finish_avx512<rows, cols>(acc, kFp4PermAvx512, x, x_stride, k, k,
                            [&](int c, int64_t i) { return weight_at<WeightFormat::kMxfp4>(w[c], i); }, out);
}

// kCpuChunk32 code order (quant/quantized_weight.h): the 16 bytes of a 32-element chunk,
// zero-extended to 32-bit lanes, hold element j in the low nibble of lane j and element 16 + j
// in the high one; vpermps reads the low 4 bits, so the register lanes are the canonical lanes
// (x needs no permutation) and two groups decode with one extension and one shift. Elements
// past the last full chunk (an NVFP4 K % 32 == 16) go through finish().
MOERT_AVX512 inline __m512i chunk32_codes_avx512(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The chunk at element i of every column: low[c] / high[c] are column c's E2M1 table times the
// block scale of elements [0, 16) / [16, 32) of the chunk (rounded once: the codec's values;
// MXFP4 passes one table for both, its block being the whole chunk).
template <int rows, int cols>
MOERT_AVX512 inline void chunk32_fma_avx512(const float* x, int64_t x_stride, int64_t i, const RowRef* w,
                                          const __m512 (&low)[cols], const __m512 (&high)[cols],
                                          __m512 (&acc)[rows][cols]) {
  __m512 w0[cols], w1[cols];
  for (int c = 0; c < cols; ++c) {
    const __m512i codes = chunk32_codes_avx512(w[c].data + i / 2);
    w0[c] = _mm512_permutexvar_ps(codes, low[c]);
    w1[c] = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), high[c]);
  }
  for (int r = 0; r < rows; ++r) {
    const __m512 x0 = _mm512_loadu_ps(x + r * x_stride + i);
    const __m512 x1 = _mm512_loadu_ps(x + r * x_stride + i + 16);
    for (int c = 0; c < cols; ++c) {
      acc[r][c] = _mm512_fmadd_ps(x0, w0[c], acc[r][c]);
      acc[r][c] = _mm512_fmadd_ps(x1, w1[c], acc[r][c]);
    }
  }
}

template <int rows, int cols>
MOERT_AVX512 void nvfp4_chunk32_tile_avx512(const float* x, int64_t x_stride, int64_t k, const RowRef* w,
                                            float* out) {
  const __m512 table = _mm512_loadu_ps(kE2m1Values.data());
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t k_chunks = k / 32 * 32;
  alignas(64) float scale[cols][kNvfp4ChunkBlocks];
  for (int64_t k0 = 0; k0 < k_chunks; k0 += kNvfp4Chunk) {
    const int64_t k1 = std::min(k_chunks, k0 + kNvfp4Chunk);
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].scales, k0 / kNvfp4BlockSize, cols, k / kNvfp4BlockSize);
      nvfp4_scales_avx512(w[c].scales + k0 / kNvfp4BlockSize, (k1 - k0) / kNvfp4BlockSize, w[c].global_scale,
                          scale[c]);
    }
    for (int64_t i = k0; i < k1; i += 32) {
      const int64_t b = (i - k0) / kNvfp4BlockSize;
      __m512 low[cols], high[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
        low[c] = _mm512_mul_ps(table, _mm512_set1_ps(scale[c][b]));
        high[c] = _mm512_mul_ps(table, _mm512_set1_ps(scale[c][b + 1]));
      }
      chunk32_fma_avx512<rows, cols>(x, x_stride, i, w, low, high, acc);
    }
  }
  finish_avx512<rows, cols>(acc, kIdentity, x, x_stride, k_chunks, k,
                            [&](int c, int64_t i) { return weight_at<WeightFormat::kNvfp4>(w[c], i); }, out);
}

template <int rows, int cols>
MOERT_AVX512 void mxfp4_chunk32_tile_avx512(const float* x, int64_t x_stride, int64_t k, const RowRef* w,
                                            float* out) {
  const __m512 table = _mm512_loadu_ps(kE2m1Values.data());
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < k; i += kMxfp4BlockSize) {
    __m512 scaled[cols];
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
      prefetch_stream_at(w[c].scales, i / kMxfp4BlockSize, cols, k / kMxfp4BlockSize);
      scaled[c] = _mm512_mul_ps(table, _mm512_set1_ps(e8m0_decode(w[c].scales[i / kMxfp4BlockSize])));
    }
    chunk32_fma_avx512<rows, cols>(x, x_stride, i, w, scaled, scaled, acc);
  }
  finish_avx512<rows, cols>(acc, kIdentity, x, x_stride, k, k,
                            [&](int c, int64_t i) { return weight_at<WeightFormat::kMxfp4>(w[c], i); }, out);
}

template <int rows, int cols, bool kCodesFinite>
MOERT_AVX512 void fp8_tile_avx512(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const int64_t k_full = k / kLanes * kLanes;
  for (int64_t i0 = 0; i0 < k_full; i0 += kFp8ScaleCols) {
    __m512 scale[cols];
    for (int c = 0; c < cols; ++c) {
      scale[c] = _mm512_set1_ps(w[c].fp8_scales[(i0 / kFp8ScaleCols) * w[c].fp8_scale_stride] * 256.0f);
    }
    const int64_t i1 = std::min(k_full, i0 + kFp8ScaleCols);
    for (int64_t i = i0; i < i1; i += kLanes) {
      __m512 wv[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, i, cols, k);
        wv[c] = _mm512_mul_ps(fp8_decode16_avx512<kCodesFinite>(w[c].data + i), scale[c]);
      }
      for (int r = 0; r < rows; ++r) {
        const __m512 xv = _mm512_loadu_ps(x + r * x_stride + i);
        for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
      }
    }
  }
  finish_avx512<rows, cols>(acc, kIdentity, x, x_stride, k_full, k,
                            [&](int c, int64_t i) { return weight_at<WeightFormat::kFp8Block>(w[c], i); }, out);
}

// Every row of a tile comes from one view, so w[0].code_order is the tile's order.
template <WeightFormat f, int rows, int cols>
void tile_avx512(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const bool chunk32 = w[0].code_order == Fp4CodeOrder::kCpuChunk32;
  if constexpr (f == WeightFormat::kNvfp4) {
    if (chunk32) return nvfp4_chunk32_tile_avx512<rows, cols>(x, x_stride, k, w, out);
    nvfp4_tile_avx512<rows, cols>(x, x_stride, k, w, out);
  } else if constexpr (f == WeightFormat::kMxfp4) {
    if (chunk32) return mxfp4_chunk32_tile_avx512<rows, cols>(x, x_stride, k, w, out);
    mxfp4_tile_avx512<rows, cols>(x, x_stride, k, w, out);
  } else {
    if (w[0].fp8_codes_finite) return fp8_tile_avx512<rows, cols, true>(x, x_stride, k, w, out);
    fp8_tile_avx512<rows, cols, false>(x, x_stride, k, w, out);
  }
}

// ---- AVX2 + FMA (16 lanes in two registers, a and b) --------------------------------------------
// FP4: broadcast the group's 8 bytes to 4 qwords, shift qword q right by 4 * a_q; its dwords
// hold nibbles a_q and a_q + 8. With a = (0, 1, 4, 5) for register a and (2, 3, 6, 7) for b,
// the lanes are the elements {0,8,1,9,4,12,5,13} and {2,10,3,11,6,14,7,15}, which is what
// unpacklo/unpackhi_ps of x[0..7], x[8..15] give. vpermps reads 3 index bits (the magnitude);
// the sign (bit 3) is flipped in afterwards: -(m * s) == (-m) * s exactly.
constexpr int kFp4PermAvx2[kLanes] = {0, 8, 1, 9, 4, 12, 5, 13, 2, 10, 3, 11, 6, 14, 7, 15};

struct Fp4ConstsAvx2 {
  __m256i shifts_a, shifts_b;
  __m256 sign;
};

MOERT_AVX2 inline Fp4ConstsAvx2 fp4_consts_avx2() {
  return {_mm256_set_epi64x(20, 16, 4, 0), _mm256_set_epi64x(28, 24, 12, 8),
          _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)))};
}

// Decodes one 16-element group into its a and b registers, given the scaled magnitudes.
MOERT_AVX2 inline void fp4_decode_avx2(const uint8_t* p, __m256 scaled_mag, const Fp4ConstsAvx2& k2, __m256& wa,
                                       __m256& wb) {
  const __m256i u = _mm256_set1_epi64x(static_cast<long long>(load_u64(p)));
  const __m256i ca = _mm256_srlv_epi64(u, k2.shifts_a);
  const __m256i cb = _mm256_srlv_epi64(u, k2.shifts_b);
  wa = _mm256_xor_ps(_mm256_permutevar8x32_ps(scaled_mag, ca),
                     _mm256_and_ps(_mm256_castsi256_ps(_mm256_slli_epi32(ca, 28)), k2.sign));
  wb = _mm256_xor_ps(_mm256_permutevar8x32_ps(scaled_mag, cb),
                     _mm256_and_ps(_mm256_castsi256_ps(_mm256_slli_epi32(cb, 28)), k2.sign));
}

template <int rows, int cols, typename WeightAtC>
MOERT_AVX2 void finish_avx2(__m256 (&acc_a)[rows][cols], __m256 (&acc_b)[rows][cols], const int* perm, const float* x,
                            int64_t x_stride, int64_t i_tail, int64_t k, WeightAtC weight_at_c, float* out) {
  static_assert(rows * cols <= 8);
  if (perm == kIdentity && i_tail == k) return cpu::x86::reduce_lanes_avx2<rows * cols>(&acc_a[0][0], &acc_b[0][0], out);
  alignas(32) float reg[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      _mm256_store_ps(reg, acc_a[r][c]);
      _mm256_store_ps(reg + 8, acc_b[r][c]);
      out[r * cols + c] = finish(reg, perm, x + r * x_stride, i_tail, k, [&](int64_t i) { return weight_at_c(c, i); });
    }
  }
}



template <int rows, int cols>
MOERT_AVX2 void nvfp4_tile_avx2(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const __m256 mag = _mm256_loadu_ps(kE2m1Values.data());  // codes 0..7: the magnitudes
  const Fp4ConstsAvx2 k2 = fp4_consts_avx2();
  __m256 acc_a[rows][cols], acc_b[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc_a[r][c] = acc_b[r][c] = _mm256_setzero_ps();
  }
  alignas(32) float scale[cols][kNvfp4ChunkBlocks];
  for (int64_t k0 = 0; k0 < k; k0 += kNvfp4Chunk) {
    const int64_t num_blocks = (std::min(k, k0 + kNvfp4Chunk) - k0) / kNvfp4BlockSize;
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].scales, k0 / kNvfp4BlockSize, cols, k / kNvfp4BlockSize);
      nvfp4_scales_avx2(w[c].scales + k0 / kNvfp4BlockSize, num_blocks, w[c].global_scale, scale[c]);
    }
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t i = k0 + b * kNvfp4BlockSize;
      __m256 wa[cols], wb[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
        fp4_decode_avx2(w[c].data + i / 2, _mm256_mul_ps(mag, _mm256_set1_ps(scale[c][b])), k2, wa[c], wb[c]);
      }
      for (int r = 0; r < rows; ++r) {
        const __m256 xl = _mm256_loadu_ps(x + r * x_stride + i);
        const __m256 xh = _mm256_loadu_ps(x + r * x_stride + i + 8);
        const __m256 xa = _mm256_unpacklo_ps(xl, xh), xb = _mm256_unpackhi_ps(xl, xh);
        for (int c = 0; c < cols; ++c) {
          acc_a[r][c] = _mm256_fmadd_ps(xa, wa[c], acc_a[r][c]);
          acc_b[r][c] = _mm256_fmadd_ps(xb, wb[c], acc_b[r][c]);
        }
      }
    }
  }
  finish_avx2<rows, cols>(acc_a, acc_b, kFp4PermAvx2, x, x_stride, k, k,
                          [&](int c, int64_t i) { return weight_at<WeightFormat::kNvfp4>(w[c], i); }, out);
}

template <int rows, int cols>
MOERT_AVX2 void mxfp4_tile_avx2(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const __m256 mag = _mm256_loadu_ps(kE2m1Values.data());
  const Fp4ConstsAvx2 k2 = fp4_consts_avx2();
  __m256 acc_a[rows][cols], acc_b[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc_a[r][c] = acc_b[r][c] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < k; i += kMxfp4BlockSize) {
    __m256 wa[2][cols], wb[2][cols];
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
      prefetch_stream_at(w[c].scales, i / kMxfp4BlockSize, cols, k / kMxfp4BlockSize);
      const __m256 scaled = _mm256_mul_ps(mag, _mm256_set1_ps(e8m0_decode(w[c].scales[i / kMxfp4BlockSize])));
      fp4_decode_avx2(w[c].data + i / 2, scaled, k2, wa[0][c], wb[0][c]);
      fp4_decode_avx2(w[c].data + i / 2 + 8, scaled, k2, wa[1][c], wb[1][c]);
    }
    for (int g = 0; g < 2; ++g) {
      for (int r = 0; r < rows; ++r) {
        const float* xr = x + r * x_stride + i + g * kLanes;
        const __m256 xl = _mm256_loadu_ps(xr), xh = _mm256_loadu_ps(xr + 8);
        const __m256 xa = _mm256_unpacklo_ps(xl, xh), xb = _mm256_unpackhi_ps(xl, xh);
        for (int c = 0; c < cols; ++c) {
          acc_a[r][c] = _mm256_fmadd_ps(xa, wa[g][c], acc_a[r][c]);
          acc_b[r][c] = _mm256_fmadd_ps(xb, wb[g][c], acc_b[r][c]);
        }
      }
    }
  }
  finish_avx2<rows, cols>(acc_a, acc_b, kFp4PermAvx2, x, x_stride, k, k,
                          [&](int c, int64_t i) { return weight_at<WeightFormat::kMxfp4>(w[c], i); }, out);
}

// kCpuChunk32 order on AVX2: bytes 0-7 of a chunk, zero-extended, hold elements 0-7 (low
// nibbles) and 16-23 (high); bytes 8-15 hold 8-15 and 24-31. Register a keeps canonical lanes
// 0-7, register b lanes 8-15 (as the FP8 path); signs as in fp4_decode_avx2.
MOERT_AVX2 inline __m256 chunk32_decode_avx2(__m256i codes, __m256 scaled_mag, __m256 sign) {
  return _mm256_xor_ps(_mm256_permutevar8x32_ps(scaled_mag, codes),
                       _mm256_and_ps(_mm256_castsi256_ps(_mm256_slli_epi32(codes, 28)), sign));
}

MOERT_AVX2 inline __m256i chunk32_codes_avx2(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// One half of a chunk (0: elements 0-15, the low nibbles; 1: elements 16-31, the high ones)
// into registers a (its elements 0-7) and b (8-15), scaled by `scaled_mag`. The codes are
// loaded again for the second half: it keeps the live registers within the 16 of AVX2.
template <int half>
MOERT_AVX2 inline void chunk32_half_avx2(const uint8_t* p, __m256 scaled_mag, __m256 sign, __m256& wa, __m256& wb) {
  __m256i a = chunk32_codes_avx2(p), b = chunk32_codes_avx2(p + 8);
  if constexpr (half == 1) {
    a = _mm256_srli_epi32(a, 4);
    b = _mm256_srli_epi32(b, 4);
  }
  wa = chunk32_decode_avx2(a, scaled_mag, sign);
  wb = chunk32_decode_avx2(b, scaled_mag, sign);
}

// acc_a (canonical lanes 0-7) and acc_b (8-15) of each row += x[i, i + 16) * one half's weights.
template <int rows, int cols>
MOERT_AVX2 inline void half_fma_avx2(const float* x, int64_t x_stride, int64_t i, const __m256 (&wa)[cols],
                                     const __m256 (&wb)[cols], __m256 (&acc_a)[rows][cols],
                                     __m256 (&acc_b)[rows][cols]) {
  for (int r = 0; r < rows; ++r) {
    const __m256 x0 = _mm256_loadu_ps(x + r * x_stride + i), x1 = _mm256_loadu_ps(x + r * x_stride + i + 8);
    for (int c = 0; c < cols; ++c) {
      acc_a[r][c] = _mm256_fmadd_ps(x0, wa[c], acc_a[r][c]);
      acc_b[r][c] = _mm256_fmadd_ps(x1, wb[c], acc_b[r][c]);
    }
  }
}

// Both halves of the chunk at element i; low[c] / high[c]: column c's magnitudes times the
// block scale of the half (one rounding each: the codec's value; MXFP4 passes one for both).
template <int rows, int cols>
MOERT_AVX2 inline void chunk32_fma_avx2(const float* x, int64_t x_stride, int64_t i, const RowRef* w, __m256 sign,
                                        const __m256 (&low)[cols], const __m256 (&high)[cols],
                                        __m256 (&acc_a)[rows][cols], __m256 (&acc_b)[rows][cols]) {
  __m256 wa[cols], wb[cols];
  for (int c = 0; c < cols; ++c) chunk32_half_avx2<0>(w[c].data + i / 2, low[c], sign, wa[c], wb[c]);
  half_fma_avx2<rows, cols>(x, x_stride, i, wa, wb, acc_a, acc_b);
  for (int c = 0; c < cols; ++c) chunk32_half_avx2<1>(w[c].data + i / 2, high[c], sign, wa[c], wb[c]);
  half_fma_avx2<rows, cols>(x, x_stride, i + 16, wa, wb, acc_a, acc_b);
}

template <int rows, int cols>
MOERT_AVX2 void nvfp4_chunk32_tile_avx2(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const __m256 mag = _mm256_loadu_ps(kE2m1Values.data());
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  __m256 acc_a[rows][cols], acc_b[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc_a[r][c] = acc_b[r][c] = _mm256_setzero_ps();
  }
  const int64_t k_chunks = k / 32 * 32;
  alignas(32) float scale[cols][kNvfp4ChunkBlocks];
  for (int64_t k0 = 0; k0 < k_chunks; k0 += kNvfp4Chunk) {
    const int64_t k1 = std::min(k_chunks, k0 + kNvfp4Chunk);
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].scales, k0 / kNvfp4BlockSize, cols, k / kNvfp4BlockSize);
      nvfp4_scales_avx2(w[c].scales + k0 / kNvfp4BlockSize, (k1 - k0) / kNvfp4BlockSize, w[c].global_scale, scale[c]);
    }
    for (int64_t i = k0; i < k1; i += 32) {
      const int64_t b = (i - k0) / kNvfp4BlockSize;
      __m256 low[cols], high[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
        low[c] = _mm256_mul_ps(mag, _mm256_set1_ps(scale[c][b]));
        high[c] = _mm256_mul_ps(mag, _mm256_set1_ps(scale[c][b + 1]));
      }
      chunk32_fma_avx2<rows, cols>(x, x_stride, i, w, sign, low, high, acc_a, acc_b);
    }
  }
  finish_avx2<rows, cols>(acc_a, acc_b, kIdentity, x, x_stride, k_chunks, k,
                          [&](int c, int64_t i) { return weight_at<WeightFormat::kNvfp4>(w[c], i); }, out);
}

template <int rows, int cols>
MOERT_AVX2 void mxfp4_chunk32_tile_avx2(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const __m256 mag = _mm256_loadu_ps(kE2m1Values.data());
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  __m256 acc_a[rows][cols], acc_b[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc_a[r][c] = acc_b[r][c] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < k; i += kMxfp4BlockSize) {
    __m256 scaled[cols];
    for (int c = 0; c < cols; ++c) {
      prefetch_stream_at(w[c].data, i / 2, cols, k / 2);
      prefetch_stream_at(w[c].scales, i / kMxfp4BlockSize, cols, k / kMxfp4BlockSize);
      scaled[c] = _mm256_mul_ps(mag, _mm256_set1_ps(e8m0_decode(w[c].scales[i / kMxfp4BlockSize])));
    }
    chunk32_fma_avx2<rows, cols>(x, x_stride, i, w, sign, scaled, scaled, acc_a, acc_b);
  }
  finish_avx2<rows, cols>(acc_a, acc_b, kIdentity, x, x_stride, k, k,
                          [&](int c, int64_t i) { return weight_at<WeightFormat::kMxfp4>(w[c], i); }, out);
}

template <int rows, int cols, bool kCodesFinite>
MOERT_AVX2 void fp8_tile_avx2(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  __m256 acc_a[rows][cols], acc_b[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc_a[r][c] = acc_b[r][c] = _mm256_setzero_ps();
  }
  const int64_t k_full = k / kLanes * kLanes;
  for (int64_t i0 = 0; i0 < k_full; i0 += kFp8ScaleCols) {
    __m256 scale[cols];
    for (int c = 0; c < cols; ++c) {
      scale[c] = _mm256_set1_ps(w[c].fp8_scales[(i0 / kFp8ScaleCols) * w[c].fp8_scale_stride] * 256.0f);
    }
    const int64_t i1 = std::min(k_full, i0 + kFp8ScaleCols);
    for (int64_t i = i0; i < i1; i += kLanes) {
      __m256 wa[cols], wb[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, i, cols, k);
        fp8_decode16_avx2<kCodesFinite>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[c].data + i)), wa[c], wb[c]);
        wa[c] = _mm256_mul_ps(wa[c], scale[c]);
        wb[c] = _mm256_mul_ps(wb[c], scale[c]);
      }
      for (int r = 0; r < rows; ++r) {
        const __m256 xl = _mm256_loadu_ps(x + r * x_stride + i), xh = _mm256_loadu_ps(x + r * x_stride + i + 8);
        for (int c = 0; c < cols; ++c) {
          acc_a[r][c] = _mm256_fmadd_ps(xl, wa[c], acc_a[r][c]);
          acc_b[r][c] = _mm256_fmadd_ps(xh, wb[c], acc_b[r][c]);
        }
      }
    }
  }
  finish_avx2<rows, cols>(acc_a, acc_b, kIdentity, x, x_stride, k_full, k,
                          [&](int c, int64_t i) { return weight_at<WeightFormat::kFp8Block>(w[c], i); }, out);
}

template <WeightFormat f, int rows, int cols>
void tile_avx2(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  const bool chunk32 = w[0].code_order == Fp4CodeOrder::kCpuChunk32;
  if constexpr (f == WeightFormat::kNvfp4) {
    if (chunk32) return nvfp4_chunk32_tile_avx2<rows, cols>(x, x_stride, k, w, out);
    nvfp4_tile_avx2<rows, cols>(x, x_stride, k, w, out);
  } else if constexpr (f == WeightFormat::kMxfp4) {
    if (chunk32) return mxfp4_chunk32_tile_avx2<rows, cols>(x, x_stride, k, w, out);
    mxfp4_tile_avx2<rows, cols>(x, x_stride, k, w, out);
  } else {
    if (w[0].fp8_codes_finite) return fp8_tile_avx2<rows, cols, true>(x, x_stride, k, w, out);
    fp8_tile_avx2<rows, cols, false>(x, x_stride, k, w, out);
  }
}

struct Avx512Kernel {
  static constexpr int kRows = 4;
  static constexpr int kCols = 4;
  static constexpr int kWideCols = 8;  // 8 accumulator chains at batch 1 (row_driver.h)
  template <WeightFormat f, int rows, int cols>
  static void tile(const float* x, int64_t k, const RowRef* w, float* out) {
    tile_avx512<f, rows, cols>(x, k, k, w, out);
  }
};

struct Avx2Kernel {
  static constexpr int kRows = 2;
  static constexpr int kCols = 2;
  template <WeightFormat f, int rows, int cols>
  static void tile(const float* x, int64_t k, const RowRef* w, float* out) {
    tile_avx2<f, rows, cols>(x, k, k, w, out);
  }
};

}  // namespace

void quantized_linear_rows_avx512(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                                  float* y, int64_t begin, int64_t end) {
  forward_kernel<Avx512Kernel>(x, num_rows, w, bias, y, begin, end);
}

void quantized_linear_rows_avx2(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                                float* y, int64_t begin, int64_t end) {
  forward_kernel<Avx2Kernel>(x, num_rows, w, bias, y, begin, end);
}

}  // namespace moert::quant::x86
