#include "quant/cpu/x86/bf16_linear_x86.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "core/cpu/prefetch.h"
#include "core/cpu/x86/reduce_lanes_x86.h"
#include "quant/cpu/bf16_linear_tiles.h"
#include "quant/cpu/x86/fp8_decode_x86.h"

namespace moert::quant::x86 {
namespace {

using namespace bf16_detail;
using qlinear_detail::prefetch_stream_at;

#define MOERT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// ---- AVX-512 BF16 --------------------------------------------------------------------------------
// w_i = e4m3 * 2^8 as BF16 for 32 codes. The sign-extended byte shifted left by 4 holds the
// mantissa in bits 4-6, the exponent e in bits 7-10 and the sign in bit 15; with bits 11-14
// set to 1000 the BF16 exponent field is e + 128: 2^(e + 1) * (1 + m / 8) = e4m3 * 2^8 for
// every code with e > 0. The codes with e = 0 (zero and the subnormals m * 2^-9, i.e. m * 2^-1
// here) come from a table by m, their sign put back after.
MOERT_AVX512_BF16 inline __m512i fp8_to_bf16_avx512(__m256i codes) {
  // BF16 of m * 2^-1 for m = 0..7 (index = the code's low 5 bits; e = 0 leaves bits 3-4 clear).
  const __m512i small_values = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                0, 0x4060, 0x4040, 0x4020, 0x4000, 0x3FC0, 0x3F80, 0x3F00, 0);
  const __m512i sx = _mm512_cvtepi8_epi16(codes);
  const __m512i shifted = _mm512_slli_epi16(sx, 4);
  // (shifted & 0x87F0) | 0x4000
  __m512i w = _mm512_ternarylogic_epi32(shifted, _mm512_set1_epi16(static_cast<short>(0x87F0)),
                                        _mm512_set1_epi16(0x4000), 0xEA);
  const __mmask32 exponent_zero = _mm512_testn_epi16_mask(sx, _mm512_set1_epi16(0x78));
  w = _mm512_mask_permutexvar_epi16(w, exponent_zero, sx, small_values);
  // w | (shifted & 0x8000): the sign again (a no-op where it is already there).
  return _mm512_ternarylogic_epi32(w, shifted, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
}

// The 32 codes of the group at element g of one weight row of k codes: a masked load for a
// last partial group (nothing past the row is read; the absent codes are 0, i.e. +0 weights).
MOERT_AVX512_BF16 inline __m256i group_codes_avx512(const uint8_t* row, int64_t g, int64_t k) {
  if (g + kBf16Group <= k) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + g));
  return _mm256_maskz_loadu_epi8(static_cast<__mmask32>((uint64_t{1} << (k - g)) - 1), row + g);
}

template <int rows, int cols>
MOERT_AVX512_BF16 void bf16_tile_avx512(const Bf16RowsView& x, int64_t t, const RowRef* w, float* out) {
  const int64_t k = x.cols, padded = bf16_padded_cols(k);
  const uint16_t* xb = x.values + t * padded;
  __m512 lanes[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) lanes[r][c] = _mm512_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleCols) {
    const int64_t b1 = std::min(padded, b0 + kFp8ScaleCols);
    __m512 partial[rows][cols];
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) partial[r][c] = _mm512_setzero_ps();
    }
    for (int64_t g = b0; g < b1; g += kBf16Group) {
      __m512i wv[cols];
      for (int c = 0; c < cols; ++c) {
        prefetch_stream_at(w[c].data, g, cols, k);
        wv[c] = fp8_to_bf16_avx512(group_codes_avx512(w[c].data, g, k));
      }
      for (int r = 0; r < rows; ++r) {
        const __m512i xv = _mm512_loadu_si512(xb + r * padded + g);
        for (int c = 0; c < cols; ++c) {
          partial[r][c] = _mm512_dpbf16_ps(partial[r][c], reinterpret_cast<const __m512bh&>(xv),
                                           reinterpret_cast<const __m512bh&>(wv[c]));
        }
      }
    }
    for (int c = 0; c < cols; ++c) {
      const __m512 factor = _mm512_set1_ps(block_factor(w[c], b0 / kFp8ScaleCols));
      for (int r = 0; r < rows; ++r) lanes[r][c] = _mm512_fmadd_ps(partial[r][c], factor, lanes[r][c]);
    }
  }
  cpu::x86::reduce_lanes_avx512<rows * cols>(&lanes[0][0], out);
}

// Dense BF16 weight rows: 32 weights per load straight into the lanes, which stay in registers
// for the whole row; the last partial group's weights under a mask (nothing past the row is
// read, the absent weights are +0). The tail is written out after the loop rather than folded
// into it: GCC 12 otherwise kept the lanes in memory, a store per vdpbf16ps.
template <int rows, int cols>
MOERT_AVX512_BF16 void bf16_dense_tile_avx512(const Bf16RowsView& x, int64_t t, const DenseRowRef* w, float* out) {
  const int64_t k = x.cols, padded = bf16_padded_cols(k);
  const uint16_t* xb = x.values + t * padded;
  __m512 lanes[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) lanes[r][c] = _mm512_setzero_ps();
  }
  int64_t g = 0;
  for (; g + kBf16Group <= k; g += kBf16Group) {
    __m512i wv[cols];
    for (int c = 0; c < cols; ++c) {
      cpu::prefetch_weight_stream(w[c].data + g, cols * k * 2);
      wv[c] = _mm512_loadu_si512(w[c].data + g);
    }
    for (int r = 0; r < rows; ++r) {
      const __m512i xv = _mm512_loadu_si512(xb + r * padded + g);
      for (int c = 0; c < cols; ++c) lanes[r][c] = _mm512_dpbf16_ps(lanes[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
  if (g < k) {
    const __mmask32 present = static_cast<__mmask32>((uint64_t{1} << (k - g)) - 1);
    __m512i wv[cols];
    for (int c = 0; c < cols; ++c) wv[c] = _mm512_maskz_loadu_epi16(present, w[c].data + g);
    for (int r = 0; r < rows; ++r) {
      const __m512i xv = _mm512_loadu_si512(xb + r * padded + g);
      for (int c = 0; c < cols; ++c) lanes[r][c] = _mm512_dpbf16_ps(lanes[r][c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
  cpu::x86::reduce_lanes_avx512<rows * cols>(&lanes[0][0], out);
}

struct Avx512Bf16Kernel {
  static constexpr int kRows = 4;  // 4 x 4 partial registers (the lanes wait in memory)
  static constexpr int kCols = 4;
  static constexpr int kDenseCols = 4;
  template <int rows, int cols>
  static void tile(const Bf16RowsView& x, int64_t t, const RowRef* w, float* out) {
    bf16_tile_avx512<rows, cols>(x, t, w, out);
  }
  template <int rows, int cols>
  static void dense_tile(const Bf16RowsView& x, int64_t t, const DenseRowRef* w, float* out) {
    bf16_dense_tile_avx512<rows, cols>(x, t, w, out);
  }
};

// ---- AVX2 + FMA ----------------------------------------------------------------------------------
// The same sums by FMA (no subnormal ever arises, so FMA and vdpbf16ps agree): the 16 lanes in
// two registers, lane l of half h taking elements 16 h + 2 l' (even) and 16 h + 2 l' + 1 (odd),
// l' = l - 8 h. x's BF16 pairs widen by a shift (even) and a mask (odd); the codes of a half
// are split into even and odd bytes, decoded by fp8_decode16_avx2 (e4m3 * 2^-8, exact; NaN
// codes are not admitted here) and multiplied by 2^16 (exact) into w.
MOERT_AVX2 inline void fp8_pairs_avx2(__m128i codes16, __m256& even, __m256& odd) {
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  fp8_decode16_avx2<true>(_mm_shuffle_epi8(codes16, split), even, odd);
  const __m256 to_w = _mm256_set1_ps(0x1p16f);
  even = _mm256_mul_ps(even, to_w);
  odd = _mm256_mul_ps(odd, to_w);
}

// 8 BF16 pairs as floats: the even elements (low halves shifted up) and the odd ones (high
// halves masked), exact.
MOERT_AVX2 inline void bf16_pairs_avx2(__m256i pairs, __m256& even, __m256& odd) {
  even = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// x rows t.. of the rounded activations as even and odd floats, for half h of the group at g.
template <int rows>
MOERT_AVX2 inline void x_pairs_avx2(const uint16_t* xb, int64_t padded, int64_t g, int h, __m256 (&even)[rows],
                                    __m256 (&odd)[rows]) {
  for (int r = 0; r < rows; ++r) {
    bf16_pairs_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + r * padded + g + 16 * h)), even[r],
                    odd[r]);
  }
}

// 16 elements from p: FP8 codes in a 128-bit register, BF16 weights in a 256-bit one.
MOERT_AVX2 inline __m128i load16_avx2(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
MOERT_AVX2 inline __m256i load16_avx2(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The 16 elements of half h of the group at element g of a row of k (zeros past k).
template <typename Element>
MOERT_AVX2 inline auto half_avx2(const Element* row, int64_t g, int h, int64_t k) {
  const int64_t at = g + 16 * h;
  if (at + 16 <= k) return load16_avx2(row + at);
  alignas(32) Element tail[16] = {};
  if (at < k) std::copy(row + at, row + k, tail);
  return load16_avx2(tail);
}

template <int rows, int cols>
MOERT_AVX2 void bf16_tile_avx2(const Bf16RowsView& x, int64_t t, const RowRef* w, float* out) {
  const int64_t k = x.cols, padded = bf16_padded_cols(k);
  const uint16_t* xb = x.values + t * padded;
  __m256 lanes[2][rows * cols];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < rows * cols; ++i) lanes[h][i] = _mm256_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < k; b0 += kFp8ScaleCols) {
    const int64_t b1 = std::min(padded, b0 + kFp8ScaleCols);
    __m256 partial[2][rows][cols];
    for (int h = 0; h < 2; ++h) {
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) partial[h][r][c] = _mm256_setzero_ps();
      }
    }
    for (int64_t g = b0; g < b1; g += kBf16Group) {
      for (int h = 0; h < 2; ++h) {
        __m256 x_even[rows], x_odd[rows];
        x_pairs_avx2<rows>(xb, padded, g, h, x_even, x_odd);
        for (int c = 0; c < cols; ++c) {
          if (h == 0) prefetch_stream_at(w[c].data, g, cols, k);
          __m256 w_even, w_odd;
          fp8_pairs_avx2(half_avx2(w[c].data, g, h, k), w_even, w_odd);
          for (int r = 0; r < rows; ++r) {
            partial[h][r][c] = _mm256_fmadd_ps(x_odd[r], w_odd, partial[h][r][c]);
            partial[h][r][c] = _mm256_fmadd_ps(x_even[r], w_even, partial[h][r][c]);
          }
        }
      }
    }
    for (int c = 0; c < cols; ++c) {
      const __m256 factor = _mm256_set1_ps(block_factor(w[c], b0 / kFp8ScaleCols));
      for (int h = 0; h < 2; ++h) {
        for (int r = 0; r < rows; ++r) {
          lanes[h][r * cols + c] = _mm256_fmadd_ps(partial[h][r][c], factor, lanes[h][r * cols + c]);
        }
      }
    }
  }
  cpu::x86::reduce_lanes_avx2<rows * cols>(lanes[0], lanes[1], out);
}

// Dense BF16 weight rows by FMA: a weight half's pairs widen like x's (shift: even, mask: odd).
template <int rows, int cols>
MOERT_AVX2 void bf16_dense_tile_avx2(const Bf16RowsView& x, int64_t t, const DenseRowRef* w, float* out) {
  const int64_t k = x.cols, padded = bf16_padded_cols(k);
  const uint16_t* xb = x.values + t * padded;
  __m256 lanes[2][rows * cols];
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < rows * cols; ++i) lanes[h][i] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < k; g += kBf16Group) {
    for (int h = 0; h < 2; ++h) {
      __m256 x_even[rows], x_odd[rows];
      x_pairs_avx2<rows>(xb, padded, g, h, x_even, x_odd);
      for (int c = 0; c < cols; ++c) {
        if (h == 0) cpu::prefetch_weight_stream(w[c].data + g, cols * k * 2);
        __m256 w_even, w_odd;
        bf16_pairs_avx2(half_avx2(w[c].data, g, h, k), w_even, w_odd);
        for (int r = 0; r < rows; ++r) {
          lanes[h][r * cols + c] = _mm256_fmadd_ps(x_odd[r], w_odd, lanes[h][r * cols + c]);
          lanes[h][r * cols + c] = _mm256_fmadd_ps(x_even[r], w_even, lanes[h][r * cols + c]);
        }
      }
    }
  }
  cpu::x86::reduce_lanes_avx2<rows * cols>(lanes[0], lanes[1], out);
}

struct Avx2Bf16Kernel {
  static constexpr int kRows = 2;  // 2 x 2 x 2 partial registers of the 16 (the lanes wait in memory)
  static constexpr int kCols = 2;
  static constexpr int kDenseCols = 2;
  template <int rows, int cols>
  static void tile(const Bf16RowsView& x, int64_t t, const RowRef* w, float* out) {
    bf16_tile_avx2<rows, cols>(x, t, w, out);
  }
  template <int rows, int cols>
  static void dense_tile(const Bf16RowsView& x, int64_t t, const DenseRowRef* w, float* out) {
    bf16_dense_tile_avx2<rows, cols>(x, t, w, out);
  }
};

}  // namespace

void bf16_linear_rows_avx512_bf16(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                                  int64_t begin, int64_t end) {
  bf16_forward<Avx512Bf16Kernel>(x, w, bias, y, begin, end);
}

void bf16_linear_rows_avx2(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end) {
  bf16_forward<Avx2Bf16Kernel>(x, w, bias, y, begin, end);
}

void bf16_dense_linear_rows_avx512_bf16(const Bf16RowsView& x, const uint16_t* w, int64_t n, const float* bias,
                                        float* y, int64_t begin, int64_t end) {
  bf16_dense_forward<Avx512Bf16Kernel>(x, w, n, bias, y, begin, end);
}

void bf16_dense_linear_rows_avx2(const Bf16RowsView& x, const uint16_t* w, int64_t n, const float* bias, float* y,
                                 int64_t begin, int64_t end) {
  bf16_dense_forward<Avx2Bf16Kernel>(x, w, n, bias, y, begin, end);
}

}  // namespace moert::quant::x86
