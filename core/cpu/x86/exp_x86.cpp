#include "core/cpu/x86/exp_x86.h"

// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "core/cpu/exp.h"
#include "core/cpu/exp_table.h"

namespace moert::cpu::x86 {
namespace {

using namespace exp_detail;

// exp_f32's main path on 8 doubles (inputs widened from floats with |x| < 88).
__attribute__((target("avx512f"), always_inline)) inline __m512d exp_main_avx512(__m512d xd) {
  const __m512d shifted = _mm512_fmadd_pd(_mm512_set1_pd(kInvLn2N), xd, _mm512_set1_pd(kShift));
  const __m512i k = _mm512_castpd_si512(shifted);
  const __m512d kd = _mm512_sub_pd(shifted, _mm512_set1_pd(kShift));
  const __m512d r = _mm512_fmsub_pd(_mm512_set1_pd(kInvLn2N), xd, kd);
  // Entry k % 32: bits 0-3 pick one of 16 in a register pair, bit 4 the pair.
  const __m512i* table = reinterpret_cast<const __m512i*>(kTable);
  const __m512i low = _mm512_permutex2var_epi64(_mm512_loadu_si512(table), k, _mm512_loadu_si512(table + 1));
  const __m512i high = _mm512_permutex2var_epi64(_mm512_loadu_si512(table + 2), k, _mm512_loadu_si512(table + 3));
  const __m512i entry = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(k, _mm512_set1_epi64(16)), low, high);
  const __m512d scale = _mm512_castsi512_pd(_mm512_add_epi64(entry, _mm512_slli_epi64(k, 52 - kTableBits)));
  const __m512d cubic_part = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(cubic_part, r2, y);
  return _mm512_mul_pd(y, scale);
}

__attribute__((target("avx2,fma"), always_inline)) inline __m256d exp_main_avx2(__m256d xd) {
  const __m256d shifted = _mm256_fmadd_pd(_mm256_set1_pd(kInvLn2N), xd, _mm256_set1_pd(kShift));
  const __m256i k = _mm256_castpd_si256(shifted);
  const __m256d kd = _mm256_sub_pd(shifted, _mm256_set1_pd(kShift));
  const __m256d r = _mm256_fmsub_pd(_mm256_set1_pd(kInvLn2N), xd, kd);
  const __m256i index = _mm256_and_si256(k, _mm256_set1_epi64x((1 << kTableBits) - 1));
  const __m256i entry = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable), index, 8);
  const __m256d scale = _mm256_castsi256_pd(_mm256_add_epi64(entry, _mm256_slli_epi64(k, 52 - kTableBits)));
  const __m256d cubic_part = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(cubic_part, r2, y);
  return _mm256_mul_pd(y, scale);
}

void exp_shifted_scalar(float* values, int64_t n, float shift) {
  for (int64_t i = 0; i < n; ++i) values[i] = exp_f32(values[i] - shift);
}

}  // namespace

// 16 values at a time; the last (n % 16) under a mask. Lanes off the main path (|x| >= 88,
// inf, NaN: rare in a softmax) send their 16 to the scalar definition.
__attribute__((target("avx512f,avx512dq"))) void exp_shifted_avx512(float* values, int64_t n, float shift) {
  const __m512 shift_v = _mm512_set1_ps(shift);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, values + i), shift_v);
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    if (_mm512_mask_cmpgt_epu32_mask(lanes, top, _mm512_set1_epi32(kMainTop)) != 0) {
      exp_shifted_scalar(values + i, std::min<int64_t>(16, n - i), shift);
      continue;
    }
    const __m512d low = exp_main_avx512(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    const __m512d high = exp_main_avx512(_mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)));
    _mm512_mask_storeu_ps(values + i, lanes,
                          _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(low)), _mm512_cvtpd_ps(high), 1));
  }
}

__attribute__((target("avx2,fma"))) void exp_shifted_avx2(float* values, int64_t n, float shift) {
  const __m256 shift_v = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(values + i), shift_v);
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(kMainTop))) != 0) {
      exp_shifted_scalar(values + i, 8, shift);
      continue;
    }
    const __m256d low = exp_main_avx2(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    const __m256d high = exp_main_avx2(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    _mm256_storeu_ps(values + i, _mm256_set_m128(_mm256_cvtpd_ps(high), _mm256_cvtpd_ps(low)));
  }
  exp_shifted_scalar(values + i, n - i, shift);
}

}  // namespace moert::cpu::x86
