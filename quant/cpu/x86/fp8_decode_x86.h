// x86 decoders shared by the quantized linear paths (quant/cpu/x86/*.cpp): E4M3 bytes to
// floats without a table, and NVFP4 block scales. Include after <immintrin.h>.
#pragma once

#include <cmath>
#include <cstdint>

#include "quant/formats/minifloat.h"

namespace moert::quant::x86 {

#define MOERT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define MOERT_AVX2 __attribute__((target("avx2,fma,f16c")))

// 16 E4M3 bytes -> 16 floats (times 2^-8; see kFp8FoldLimit), NaN codes -> NaN. With
// kCodesFinite (QuantizedWeightView::fp8_codes_finite: no NaN code in the weight) the NaN
// fix-up is left out: 3 of 8 instructions.
template <bool kCodesFinite = false>
MOERT_AVX512 inline __m512 fp8_decode16_avx512(const uint8_t* p) {
  const __m256i sx = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  // Sign-extended byte << 7: bits 7..14 = the byte, bit 15 = its sign; drop bit 14.
  __m256i h = _mm256_and_si256(_mm256_slli_epi16(sx, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  if constexpr (!kCodesFinite) {
    const __m256i mag = _mm256_set1_epi16(0x3F80);
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, mag), mag);
    h = _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7E00));
  }
  return _mm512_cvtph_ps(h);
}

// The E4M3 bytes through fp8_decode16_avx512 (the value times 2^-8, exact) times 256 * global:
// one rounding of the exact product, i.e. e4m3_decode(byte) * global_scale (no gather).
MOERT_AVX512 inline void nvfp4_scales_avx512(const uint8_t* bytes, int64_t count, float global_scale, float* out) {
  const __m512 g = _mm512_set1_ps(global_scale * 256.0f);
  int64_t b = 0;
  for (; b + 16 <= count; b += 16) _mm512_storeu_ps(out + b, _mm512_mul_ps(fp8_decode16_avx512(bytes + b), g));
  for (; b < count; ++b) out[b] = e4m3_decode(bytes[b]) * global_scale;
}

// 16 E4M3 bytes (in a register) -> 16 floats times 2^-8, lanes 0-7 in `a`, 8-15 in `b`, as
// fp8_decode16_avx512 (kCodesFinite likewise): one widening, shift and mask for all 16, then two
// conversions.
template <bool kCodesFinite = false>
MOERT_AVX2 inline void fp8_decode16_avx2(__m128i codes, __m256& a, __m256& b) {
  const __m256i sx = _mm256_cvtepi8_epi16(codes);
  __m256i h = _mm256_and_si256(_mm256_slli_epi16(sx, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  if constexpr (!kCodesFinite) {
    const __m256i mag = _mm256_set1_epi16(0x3F80);
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, mag), mag);
    // OR-ing 0x7E00 into S.0111111.1110000000 gives exponent 11111 with a nonzero mantissa.
    h = _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7E00)));
  }
  a = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  b = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// True when every byte is a non-negative finite E4M3 code (0x00 .. 0x7E): what the loader
// admits as NVFP4 block scales (it rejects NaN and negative ones).
MOERT_AVX2 inline bool plain_e4m3_scales(const uint8_t* bytes, int64_t count) {
  int64_t b = 0;
  __m256i flagged = _mm256_setzero_si256();  // sign bit of each byte: 0x7F or >= 0x80 seen
  for (; b + 32 <= count; b += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes + b));
    flagged = _mm256_or_si256(flagged, _mm256_or_si256(v, _mm256_cmpgt_epi8(v, _mm256_set1_epi8(0x7E))));
  }
  bool plain = _mm256_movemask_epi8(flagged) == 0;
  for (; b < count; ++b) plain = plain && bytes[b] < 0x7F;
  return plain;
}

// As nvfp4_scales_avx512, in 256-bit registers. Plain scales (plain_e4m3_scales) with |global| < 2^8 take
// a shorter decode: the byte shifted left by 20 is the float e4m3 * 2^-120 exactly (E4M3's
// exponent and mantissa land in the float's, its subnormals on float subnormals), times
// global * 2^120 (exact: a power of two, finite for |global| < 2^8) rounds the exact product
// e4m3 * global once, as the codec does. Relies on subnormal operands being honoured (no DAZ).
MOERT_AVX2 inline void nvfp4_scales_avx2(const uint8_t* bytes, int64_t count, float global_scale, float* out) {
  int64_t b = 0;
  if (std::fabs(global_scale) < 256.0f && plain_e4m3_scales(bytes, count)) {
    const __m256 g = _mm256_set1_ps(global_scale * 0x1p120f);
    for (; b + 8 <= count; b += 8) {
      const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + b)));
      _mm256_storeu_ps(out + b, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(e, 20)), g));
    }
  } else {
    const __m256 g = _mm256_set1_ps(global_scale * 256.0f);
    for (; b + 16 <= count; b += 16) {
      __m256 lo, hi;
      fp8_decode16_avx2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + b)), lo, hi);
      _mm256_storeu_ps(out + b, _mm256_mul_ps(lo, g));
      _mm256_storeu_ps(out + b + 8, _mm256_mul_ps(hi, g));
    }
  }
  for (; b < count; ++b) out[b] = e4m3_decode(bytes[b]) * global_scale;
}

}  // namespace moert::quant::x86
