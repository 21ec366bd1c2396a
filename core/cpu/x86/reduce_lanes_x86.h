// Internal to the x86 kernels (core/cpu/x86, quant/cpu/x86): the canonical tree of
// core/cpu/dot_lanes.h (lane[l] += lane[l + w] for w = 8, 4, 2, 1) applied to many
// accumulators at once, with shuffles instead of a store and 15 scalar adds each.
//
// Invariant: out[i] equals reduce_lanes() of accumulator i's 16 lanes bit for bit: every add
// sums the same two partial sums as the scalar tree, in the same operand order, and unused
// slots are zeros that only ever meet each other. A 4x4 tile over K = 1024 spent ~20% of its
// time in the scalar tree (docs/perf/cpu-roofline.md, seventh session).
#pragma once

// GCC 12 reports _mm512_undefined_*() inside its own intrinsics as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace moert::cpu::x86 {

// out[0, count) = the first count lanes of v, by plain stores of 8, 4, 2 and 1 floats: the
// caller reads them back at once, and a masked store cannot forward to those loads (a stall
// after every tile, ~10% of batch-1 int8 FP4 decode on AMD Zen: docs/perf/cpu-roofline.md).
template <int count>
__attribute__((target("sse2"), always_inline)) inline void store_first_lanes(float* out, __m128 v) {
  static_assert(count >= 0 && count <= 4);
  if constexpr (count == 4) {
    _mm_storeu_ps(out, v);
  } else if constexpr (count >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(out), v);
    if constexpr (count == 3) _mm_store_ss(out + 2, _mm_movehl_ps(v, v));
  } else if constexpr (count == 1) {
    _mm_store_ss(out, v);
  }
}

template <int count>
__attribute__((target("avx"), always_inline)) inline void store_first_lanes(float* out, __m256 v) {
  static_assert(count >= 0 && count <= 8);
  if constexpr (count == 8) {
    _mm256_storeu_ps(out, v);
  } else if constexpr (count > 4) {
    _mm_storeu_ps(out, _mm256_castps256_ps128(v));
    store_first_lanes<count - 4>(out + 4, _mm256_extractf128_ps(v, 1));
  } else {
    store_first_lanes<count>(out, _mm256_castps256_ps128(v));
  }
}

template <int count>
__attribute__((target("avx512f"), always_inline)) inline void store_first_lanes(float* out, __m512 v) {
  static_assert(count >= 1 && count <= 16);
  if constexpr (count == 16) {
    _mm512_storeu_ps(out, v);
  } else if constexpr (count > 8) {
    _mm256_storeu_ps(out, _mm512_castps512_ps256(v));
    store_first_lanes<count - 8>(out + 8, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  } else {
    store_first_lanes<count>(out, _mm512_castps512_ps256(v));
  }
}

// out[i] = the canonical tree of acc[i], for i < count (1..16). Each stage pairs registers
// 2j and 2j + 1 of the previous one; with count known, the stages shrink to what it fills.
template <int count>
__attribute__((target("avx512f"), always_inline)) inline void reduce_up_to_16_avx512(const __m512* acc, float* out) {
  static_assert(count >= 1 && count <= 16);
  constexpr int n8 = (count + 1) / 2, n4 = (n8 + 1) / 2, n2 = (n4 + 1) / 2;
  const __m512 zero = _mm512_setzero_ps();  // the slots no accumulator fills
  // w = 8: 128-bit quarters Q0..Q3 of each register; [Q0 + Q2, Q1 + Q3] of a pair side by side.
  __m512 s8[n8];
  for (int j = 0; j < n8; ++j) {
    const __m512 a = acc[2 * j], b = 2 * j + 1 < count ? acc[2 * j + 1] : zero;
    s8[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  // w = 4: quarter q of s4[j] holds the 4 partial lanes of acc[4j + q].
  __m512 s4[n4];
  for (int j = 0; j < n4; ++j) {
    const __m512 a = s8[2 * j], b = 2 * j + 1 < n8 ? s8[2 * j + 1] : zero;
    s4[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
  }
  // w = 2: quarter q of s2[j] holds 2 lanes of acc[8j + q], then 2 of acc[8j + 4 + q].
  __m512 s2[n2];
  for (int j = 0; j < n2; ++j) {
    const __m512 a = s4[2 * j], b = 2 * j + 1 < n4 ? s4[2 * j + 1] : zero;
    s2[j] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
  }
  // w = 1: element e of quarter q is the sum of acc[4e + q]; gather them in order.
  const __m512 a = s2[0], b = 1 < n2 ? s2[1] : zero;
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  store_first_lanes<count>(out, _mm512_permutexvar_ps(order, sums));
}

// out[i] = the canonical tree of acc[i], for i < count (any count >= 1, 16 at a time).
template <int count>
__attribute__((target("avx512f"), always_inline)) inline void reduce_lanes_avx512(const __m512* acc, float* out) {
  if constexpr (count > 16) {
    reduce_up_to_16_avx512<16>(acc, out);
    reduce_lanes_avx512<count - 16>(acc + 16, out + 16);
  } else {
    reduce_up_to_16_avx512<count>(acc, out);
  }
}

// out[i] = the canonical tree of the accumulator whose lanes 0-7 are lo[i] and 8-15 hi[i], for
// i < count (1..8).
template <int count>
__attribute__((target("avx2"), always_inline)) inline void reduce_lanes_avx2(const __m256* lo, const __m256* hi, float* out) {
  static_assert(count >= 1 && count <= 8);
  constexpr int n4 = (count + 1) / 2, n2 = (n4 + 1) / 2;
  const __m256 zero = _mm256_setzero_ps();  // the slots no accumulator fills
  // w = 8: one register per accumulator.
  __m256 s8[count];
  for (int i = 0; i < count; ++i) s8[i] = _mm256_add_ps(lo[i], hi[i]);
  // w = 4: 128-bit half h of s4[j] holds the 4 partial lanes of accumulator 2j + h.
  __m256 s4[n4];
  for (int j = 0; j < n4; ++j) {
    const __m256 a = s8[2 * j], b = 2 * j + 1 < count ? s8[2 * j + 1] : zero;
    s4[j] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  // w = 2: half h of s2[j] holds 2 lanes of accumulator 4j + h, then 2 of 4j + 2 + h.
  __m256 s2[n2];
  for (int j = 0; j < n2; ++j) {
    const __m256 a = s4[2 * j], b = 2 * j + 1 < n4 ? s4[2 * j + 1] : zero;
    s2[j] = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x44), _mm256_shuffle_ps(a, b, 0xEE));
  }
  // w = 1: element e of half h is the sum of accumulator 2e + h; gather them in order.
  const __m256 a = s2[0], b = 1 < n2 ? s2[1] : zero;
  const __m256 sums = _mm256_add_ps(_mm256_shuffle_ps(a, b, 0x88), _mm256_shuffle_ps(a, b, 0xDD));
  const __m256i order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
  store_first_lanes<count>(out, _mm256_permutevar8x32_ps(sums, order));
}

}  // namespace moert::cpu::x86
