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

// out[i] = the canonical tree of acc[i], for i < count (1..16).
__attribute__((target("avx512f"))) inline void reduce_lanes_avx512(const __m512* acc, int count, float* out) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = i < count ? acc[i] : _mm512_setzero_ps();
  // w = 8: 128-bit quarters Q0..Q3 of each register; [Q0 + Q2, Q1 + Q3] of a pair side by side.
  __m512 s8[8];
  for (int j = 0; j < 8; ++j) {
    s8[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x44),
                          _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xEE));
  }
  // w = 4: quarter q of s4[j] holds the 4 partial lanes of a[4j + q].
  __m512 s4[4];
  for (int j = 0; j < 4; ++j) {
    s4[j] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * j], s8[2 * j + 1], 0x88),
                          _mm512_shuffle_f32x4(s8[2 * j], s8[2 * j + 1], 0xDD));
  }
  // w = 2: quarter q of s2[j] holds 2 lanes of a[8j + q], then 2 of a[8j + 4 + q].
  __m512 s2[2];
  for (int j = 0; j < 2; ++j) {
    s2[j] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * j], s4[2 * j + 1], 0x44),
                          _mm512_shuffle_ps(s4[2 * j], s4[2 * j + 1], 0xEE));
  }
  // w = 1: element e of quarter q is the sum of a[4e + q]; gather them in order.
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], 0x88), _mm512_shuffle_ps(s2[0], s2[1], 0xDD));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << count) - 1u), _mm512_permutexvar_ps(order, sums));
}

// out[i] = the canonical tree of the accumulator whose lanes 0-7 are lo[i] and 8-15 hi[i], for
// i < count (1..8).
__attribute__((target("avx2"))) inline void reduce_lanes_avx2(const __m256* lo, const __m256* hi, int count,
                                                              float* out) {
  // w = 8: one register per accumulator.
  __m256 s8[8];
  for (int i = 0; i < 8; ++i) s8[i] = i < count ? _mm256_add_ps(lo[i], hi[i]) : _mm256_setzero_ps();
  // w = 4: 128-bit half h of s4[j] holds the 4 partial lanes of accumulator 2j + h.
  __m256 s4[4];
  for (int j = 0; j < 4; ++j) {
    s4[j] = _mm256_add_ps(_mm256_permute2f128_ps(s8[2 * j], s8[2 * j + 1], 0x20),
                          _mm256_permute2f128_ps(s8[2 * j], s8[2 * j + 1], 0x31));
  }
  // w = 2: half h of s2[j] holds 2 lanes of accumulator 4j + h, then 2 of 4j + 2 + h.
  __m256 s2[2];
  for (int j = 0; j < 2; ++j) {
    s2[j] = _mm256_add_ps(_mm256_shuffle_ps(s4[2 * j], s4[2 * j + 1], 0x44),
                          _mm256_shuffle_ps(s4[2 * j], s4[2 * j + 1], 0xEE));
  }
  // w = 1: element e of half h is the sum of accumulator 2e + h; gather them in order.
  const __m256 sums = _mm256_add_ps(_mm256_shuffle_ps(s2[0], s2[1], 0x88), _mm256_shuffle_ps(s2[0], s2[1], 0xDD));
  const __m256i order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  _mm256_maskstore_ps(out, keep, _mm256_permutevar8x32_ps(sums, order));
}

}  // namespace moert::cpu::x86
