#include "quant/cpu/x86/int8_linear_x86.h"

// GCC 12 reports _mm512_undefined_epi32() inside its own intrinsics (_mm512_broadcast_i32x4)
// as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <type_traits>

#include "core/cpu/prefetch.h"
#include "core/cpu/x86/reduce_lanes_x86.h"
#include "quant/cpu/int8_linear_tiles.h"
#include "quant/cpu/x86/fp8_decode_x86.h"

namespace moert::quant::x86 {
namespace {

using namespace int8_detail;

// Full groups are taken four at a time (a quad, kQuadGroups below), their block scales decoded
// into registers. The groups past the last quad have theirs decoded a chunk of groups at a time
// into a stack buffer: one float per scale byte (NVFP4: per 16 elements, MXFP4: per 32), zeros
// past K.
constexpr int64_t kChunkGroups = 16;
constexpr int64_t kChunkScales = kChunkGroups * 4 + 4;

// E8M0 bytes -> floats 2^(e - 127) by placing e in the exponent field: e = 0 is the subnormal
// 2^-127 and e = 255 the NaN code, as e8m0_decode.
MOERT_AVX512 inline __m512 e8m0_decode16_avx512(__m128i bytes) {
  const __m512i e = _mm512_cvtepu8_epi32(bytes);
  __m512i f = _mm512_slli_epi32(e, 23);
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_castsi512_ps(f);
}

MOERT_AVX512 inline void e8m0_scales_avx512(const uint8_t* bytes, int64_t count, float* out) {
  int64_t b = 0;
  for (; b + 16 <= count; b += 16) {
    _mm512_storeu_ps(out + b, e8m0_decode16_avx512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + b))));
  }
  for (; b < count; ++b) out[b] = e8m0_decode(bytes[b]);
}

MOERT_AVX2 inline void e8m0_scales_avx2(const uint8_t* bytes, int64_t count, float* out) {
  int64_t b = 0;
  for (; b + 8 <= count; b += 8) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + b)));
    __m256i f = _mm256_slli_epi32(e, 23);
    f = _mm256_blendv_epi8(f, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    f = _mm256_blendv_epi8(f, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b), f);
  }
  for (; b < count; ++b) out[b] = e8m0_decode(bytes[b]);
}

// Scales of the groups [g0, g1) of column c into out[0 ..): NVFP4 e4m3 * global, MXFP4 e8m0
// (the SIMD decoders give the codecs' bits).
// The scale stream is prefetched one tile of `cols` rows ahead (core/cpu/prefetch.h).
template <typename Nvfp4Scales, typename E8m0Scales>
inline void decode_chunk_scales(const Int8Col& c, int cols, int64_t g0, int64_t g1, float* out,
                                Nvfp4Scales nvfp4_scales, E8m0Scales e8m0_scales) {
  const int64_t per_group = c.nvfp4 ? 4 : 2;
  const int64_t block = c.nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize;
  const int64_t first = g0 * per_group;
  const int64_t present = std::min(g1 * per_group, c.k / block) - first;
  cpu::prefetch_weight_stream(c.scales + first, cols * (c.k / block));
  if (c.nvfp4) {
    nvfp4_scales(c.scales + first, present, c.global_scale, out);
  } else {
    e8m0_scales(c.scales + first, present, out);
  }
  for (int64_t b = present; b < (g1 - g0) * per_group; ++b) out[b] = 0.0f;
}

// A full group's 32 code bytes are read in place in the weight's code order; a last, partial
// group is packed into a tail buffer in the kCpuChunk32 form (pack_group_codes). Every column of
// a tile has the same group in hand, so the form is the tile's (kCheckpointOrder) for full groups
// and kCpuChunk32 for the tail, known at compile time either way.

// Calls tile(nvfp4, checkpoint_order) with std::bool_constant arguments for the form of the
// tile's weights (every column of a tile comes from one view: `first` tells).
template <typename Tile>
inline void with_tile_form(const Int8Col& first, Tile tile) {
  const bool checkpoint_order = first.order == Fp4CodeOrder::kCheckpoint;
  if (first.nvfp4) {
    if (checkpoint_order) return tile(std::true_type{}, std::true_type{});
    return tile(std::true_type{}, std::false_type{});
  }
  if (checkpoint_order) return tile(std::false_type{}, std::true_type{});
  tile(std::false_type{}, std::false_type{});
}

// ---- AVX-512 -----------------------------------------------------------------------------------
// The 64 group bytes from 32 code bytes v, with lo = v & 15 and hi = v >> 4 & 15 (16-byte lanes:
// elements 0-31 and 32-63): kCpuChunk32 form [lo | hi]; checkpoint order (byte i holds elements
// 2i, 2i + 1) [unpacklo(lo, hi) | unpackhi(lo, hi)], the nibbles interleaved back into element
// order per 16-byte lane. Either way group bytes 0-31 then 32-63 (int8_group_element); one
// vpshufb then maps the codes to 12 + 2 * e2m1. Register dword lane l = group lane l, so the
// float lanes are the canonical lanes.
// The tile knows the form at compile time (kCheckpointOrder), so the loop has no branch on it.
// The kCpuChunk32 form needs no cross-lane move: the 32 bytes broadcast to both register halves,
// the upper half shifted right by 4 (vpsrlvw), then masked.
template <bool kCheckpointOrder>
MOERT_AVX512 inline __m512i weight_bytes_avx512(const uint8_t* bytes, __m512i lut) {
  if constexpr (kCheckpointOrder) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes));
    const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    const __m512i nibbles =
        _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_unpacklo_epi8(lo, hi)), _mm256_unpackhi_epi8(lo, hi), 1);
    return _mm512_shuffle_epi8(lut, nibbles);
  }
  const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes)));
  const __m512i upper_by_4 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  const __m512i nibbles = _mm512_and_si512(_mm512_srlv_epi16(v, upper_by_4), _mm512_set1_epi8(0x0F));
  return _mm512_shuffle_epi8(lut, nibbles);
}

// acc + the 4-byte dot products of unsigned u and signed s per dword lane (exact: |u s| <=
// 24 * 127, no saturation). With VNNI one vpdpbusd, written as asm so that the function
// needs no VNNI target (a VNNI target would let the compiler fuse the non-VNNI variant's
// vpmaddwd + vpaddd into a VNNI instruction).
template <bool kVnni>
MOERT_AVX512 inline __m512i dot_bytes_avx512(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
  } else {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
}

// Full groups are taken four at a time with their block scales decoded in one register (NVFP4:
// the 16 blocks, MXFP4: the 8 blocks in lanes 0-7; the bits of the codec, as the buffered
// decoders) and spread to group q's lanes with one vpermps (quad_lane_index<kNvfp4>(q)).
constexpr int64_t kQuadGroups = 4;

template <bool kNvfp4>
MOERT_AVX512 inline __m512 quad_scales_avx512(const Int8Col& c, int64_t g, __m512 global_times_256) {
  if constexpr (kNvfp4) return _mm512_mul_ps(fp8_decode16_avx512(c.scales + 4 * g), global_times_256);
  return e8m0_decode16_avx512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c.scales + 2 * g)));
}

// Group q of a quad: its lane l reads quad scale 4q + block (NVFP4 blocks 0, 2, 1, 3 over 4 lanes
// each) or 2q + block (MXFP4 blocks 0, 1, 0, 1).
template <bool kNvfp4>
MOERT_AVX512 inline __m512i quad_lane_index(int q) {
  if constexpr (kNvfp4) {
    return _mm512_add_epi32(_mm512_set1_epi32(4 * q), _mm512_set_epi32(3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0));
  }
  return _mm512_add_epi32(_mm512_set1_epi32(2 * q), _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0));
}

// The 16 lane scales of a group from its block scales at p: NVFP4 blocks 0, 2, 1, 3 (4 per
// group), MXFP4 blocks 0, 1, 0, 1 (2 per group), each over 4 lanes.
template <bool kNvfp4>
MOERT_AVX512 inline __m512 weight_lane_scales_avx512(const float* p) {
  if constexpr (kNvfp4) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0),
                                 _mm512_zextps128_ps512(_mm_loadu_ps(p)));
  }
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0),
                               _mm512_zextps128_ps512(two));
}

// Group g of every column against rows t .. t + rows - 1: acc[r][c] += the group's lanes, the
// weight bytes wu[c] and lane scales ws[c] in hand.
template <int rows, int cols, bool kVnni>
MOERT_AVX512 inline void int8_group_avx512(const Int8RowsView& x, int64_t t, int64_t groups, int64_t g,
                                           const __m512i (&wu)[cols], const __m512 (&ws)[cols],
                                           __m512 (&acc)[rows][cols]) {
  for (int r = 0; r < rows; ++r) {
    const int64_t at = (t + r) * groups + g;
    const __m512i xq = _mm512_loadu_si512(x.codes + at * kInt8Group);
    const __m512 xs = _mm512_loadu_ps(x.lane_scales + at * kInt8GroupLanes);
    const __m512i offset = _mm512_loadu_si512(x.lane_offsets + at * kInt8GroupLanes);
    for (int c = 0; c < cols; ++c) {
      const __m512i sum = dot_bytes_avx512<kVnni>(offset, wu[c], xq);
      acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws[c], xs), acc[r][c]);
    }
  }
}

template <int rows, int cols, bool kVnni, bool kNvfp4, bool kCheckpointOrder>
MOERT_AVX512 void int8_tile_avx512(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
  const int64_t groups = int8_groups(x.cols), full_groups = x.cols / kInt8Group;
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kOffsetDoubledE2m1)));
  constexpr int64_t per_group = kNvfp4 ? 4 : 2;
  __m512 acc[rows][cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const __m512 global_times_256 = _mm512_set1_ps(w[0].global_scale * 256.0f);
  const int64_t quad_end = full_groups / kQuadGroups * kQuadGroups;
  for (int64_t g0 = 0; g0 < quad_end; g0 += kQuadGroups) {
    __m512 quad[cols];
    for (int c = 0; c < cols; ++c) {
      if (g0 * per_group % cpu::kCacheLineBytes == 0) {
        cpu::prefetch_weight_stream(w[c].scales + g0 * per_group, cols * (w[c].k / (kNvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize)));
      }
      quad[c] = quad_scales_avx512<kNvfp4>(w[c], g0, global_times_256);
    }
    for (int q = 0; q < kQuadGroups; ++q) {
      const int64_t g = g0 + q;
      const __m512i index = quad_lane_index<kNvfp4>(q);
      __m512i wu[cols];
      __m512 ws[cols];
      for (int c = 0; c < cols; ++c) {
        if (q % 2 == 0) cpu::prefetch_weight_stream(w[c].codes + g * 32, cols * (w[c].k / 2));
        wu[c] = weight_bytes_avx512<kCheckpointOrder>(w[c].codes + g * 32, lut);
        ws[c] = _mm512_permutexvar_ps(index, quad[c]);
      }
      int8_group_avx512<rows, cols, kVnni>(x, t, groups, g, wu, ws, acc);
    }
  }
  // The last groups (fewer than a quad, or a partial one) through the buffered scales.
  alignas(64) float scale[cols][kChunkScales];
  alignas(32) uint8_t tail[32];
  for (int64_t g0 = quad_end; g0 < groups; g0 += kChunkGroups) {
    const int64_t g1 = std::min(groups, g0 + kChunkGroups);
    for (int c = 0; c < cols; ++c) decode_chunk_scales(w[c], cols, g0, g1, scale[c], nvfp4_scales_avx512, e8m0_scales_avx512);
    for (int64_t g = g0; g < g1; ++g) {
      __m512i wu[cols];
      __m512 ws[cols];
      for (int c = 0; c < cols; ++c) {
        if (g < full_groups) {
          wu[c] = weight_bytes_avx512<kCheckpointOrder>(w[c].codes + g * 32, lut);
        } else {
          pack_group_codes(w[c], g, tail);
          wu[c] = weight_bytes_avx512<false>(tail, lut);
        }
        ws[c] = weight_lane_scales_avx512<kNvfp4>(scale[c] + (g - g0) * per_group);
      }
      int8_group_avx512<rows, cols, kVnni>(x, t, groups, g, wu, ws, acc);
    }
  }
  static_assert(rows * cols <= 16 && kInt8GroupLanes == 16);
  cpu::x86::reduce_lanes_avx512<rows * cols>(&acc[0][0], out);
}

// quantize_block_portable on one register: the same max, product and round-to-nearest-even
// (vcvtps2dq under the default rounding mode is nearbyint); |x * 127 / amax| <= 127 needs no
// saturation, the narrowing saturates anyway.
MOERT_AVX512 inline float quantize_block_avx512(const float* x, int8_t* codes) {
  const __m512 v = _mm512_loadu_ps(x);
  const __m512 magnitude = _mm512_abs_ps(v);
  if (_mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ) != 0xFFFF) {
    std::fill_n(codes, 16, int8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float amax = _mm512_reduce_max_ps(magnitude);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(inv)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtsepi32_epi8(q));
  return 0.5f * (amax / 127.0f);
}

template <bool kVnni>
struct Avx512Int8Kernel {
  static constexpr int kRows = 4;
  static constexpr int kCols = 4;
  static constexpr int kWideCols = 8;  // batch-1 tiles: 8 accumulator chains (row_driver.h)
  template <int rows, int cols>
  static void tile(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
    with_tile_form(w[0], [&](auto nvfp4, auto checkpoint_order) {
      int8_tile_avx512<rows, cols, kVnni, decltype(nvfp4)::value, decltype(checkpoint_order)::value>(x, t, w, out);
    });
  }
};

// ---- AVX2 --------------------------------------------------------------------------------------
// Half 0 of a group (group bytes 0-31, lanes 0-7) and half 1 (bytes 32-63, lanes 8-15), as in
// weight_bytes_avx512: kCpuChunk32 form lo / hi, checkpoint order unpacklo / unpackhi(lo, hi).
// The halves run one after the other to keep the live registers within AVX2's 16.
template <int half, bool kCheckpointOrder>
MOERT_AVX2 inline __m256i weight_bytes_avx2(const uint8_t* bytes, __m256i lut) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes));
  __m256i nibbles;
  if constexpr (kCheckpointOrder) {
    const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    nibbles = half == 0 ? _mm256_unpacklo_epi8(lo, hi) : _mm256_unpackhi_epi8(lo, hi);
  } else {
    nibbles = _mm256_and_si256(half == 0 ? v : _mm256_srli_epi16(v, 4), low4);
  }
  return _mm256_shuffle_epi8(lut, nibbles);
}

// Lane scales of one half: NVFP4 half 0 = blocks 0, 2 and half 1 = blocks 1, 3; MXFP4 both
// halves = blocks 0, 1; each over 4 lanes.
template <int half, bool kNvfp4>
MOERT_AVX2 inline __m256 weight_lane_scales_avx2(const float* p) {
  if constexpr (kNvfp4) {
    const __m256i index = half == 0 ? _mm256_set_epi32(2, 2, 2, 2, 0, 0, 0, 0) : _mm256_set_epi32(3, 3, 3, 3, 1, 1, 1, 1);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), index);
  }
  const __m128 two = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two), _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
}

template <int half, int rows, int cols, bool kNvfp4, bool kCheckpointOrder>
MOERT_AVX2 inline void int8_half_avx2(const Int8RowsView& x, int64_t t, int64_t groups, int64_t g,
                                      const uint8_t* const (&codes)[cols], const float* const (&scales)[cols],
                                      __m256i lut, __m256 (&acc)[rows][cols][2]) {
  __m256i wu[cols];
  __m256 ws[cols];
  for (int c = 0; c < cols; ++c) {
    wu[c] = weight_bytes_avx2<half, kCheckpointOrder>(codes[c], lut);
    ws[c] = weight_lane_scales_avx2<half, kNvfp4>(scales[c]);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < rows; ++r) {
    const int64_t at = (t + r) * groups + g;
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.codes + at * kInt8Group + 32 * half));
    const __m256 xs = _mm256_loadu_ps(x.lane_scales + at * kInt8GroupLanes + 8 * half);
    const __m256i offset =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.lane_offsets + at * kInt8GroupLanes + 8 * half));
    for (int c = 0; c < cols; ++c) {
      const __m256i sum = _mm256_add_epi32(offset, _mm256_madd_epi16(_mm256_maddubs_epi16(wu[c], xq), ones));
      acc[r][c][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ws[c], xs), acc[r][c][half]);
    }
  }
}

template <int rows, int cols, bool kNvfp4, bool kCheckpointOrder>
MOERT_AVX2 void int8_tile_avx2(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
  const int64_t groups = int8_groups(x.cols), full_groups = x.cols / kInt8Group;
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kOffsetDoubledE2m1)));
  constexpr int64_t per_group = kNvfp4 ? 4 : 2;
  __m256 acc[rows][cols][2];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  }
  alignas(32) float scale[cols][kChunkScales];
  alignas(32) uint8_t tail[cols][32];
  for (int64_t g0 = 0; g0 < groups; g0 += kChunkGroups) {
    const int64_t g1 = std::min(groups, g0 + kChunkGroups);
    for (int c = 0; c < cols; ++c) decode_chunk_scales(w[c], cols, g0, g1, scale[c], nvfp4_scales_avx2, e8m0_scales_avx2);
    for (int64_t g = g0; g < g1; ++g) {
      const bool full = g < full_groups;
      const uint8_t* codes[cols];
      const float* scales[cols];
      for (int c = 0; c < cols; ++c) {
        if (g % 2 == 0) cpu::prefetch_weight_stream(w[c].codes + g * 32, cols * (w[c].k / 2));
        if (full) {
          codes[c] = w[c].codes + g * 32;
        } else {
          pack_group_codes(w[c], g, tail[c]);
          codes[c] = tail[c];
        }
        scales[c] = scale[c] + (g - g0) * per_group;
      }
      if (full) {
        int8_half_avx2<0, rows, cols, kNvfp4, kCheckpointOrder>(x, t, groups, g, codes, scales, lut, acc);
        int8_half_avx2<1, rows, cols, kNvfp4, kCheckpointOrder>(x, t, groups, g, codes, scales, lut, acc);
      } else {
        int8_half_avx2<0, rows, cols, kNvfp4, false>(x, t, groups, g, codes, scales, lut, acc);
        int8_half_avx2<1, rows, cols, kNvfp4, false>(x, t, groups, g, codes, scales, lut, acc);
      }
    }
  }
  static_assert(rows * cols <= 8);
  __m256 lo[rows * cols], hi[rows * cols];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      lo[r * cols + c] = acc[r][c][0];
      hi[r * cols + c] = acc[r][c][1];
    }
  }
  cpu::x86::reduce_lanes_avx2<rows * cols>(lo, hi, out);
}

// quantize_block_portable in two 8-float halves (as quantize_block_avx512).
MOERT_AVX2 inline float quantize_block_avx2(const float* x, int8_t* codes) {
  const __m256 sign = _mm256_set1_ps(-0.0f), infinity = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 m0 = _mm256_andnot_ps(sign, v0), m1 = _mm256_andnot_ps(sign, v1);
  const int finite = _mm256_movemask_ps(_mm256_cmp_ps(m0, infinity, _CMP_LT_OQ)) &
                     _mm256_movemask_ps(_mm256_cmp_ps(m1, infinity, _CMP_LT_OQ));
  if (finite != 0xFF) {
    std::fill_n(codes, 16, int8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  __m256 m = _mm256_max_ps(m0, m1);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const __m256 scale = _mm256_set1_ps(inv);
  const __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, scale)), q1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, scale));
  // packs works per 128-bit lane: [q0 0-3, q1 0-3, q0 4-7, q1 4-7] -> element order by 64-bit lanes.
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes),
                   _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
  return 0.5f * (amax / 127.0f);
}

struct Avx2Int8Kernel {
  static constexpr int kRows = 2;
  static constexpr int kCols = 2;
  template <int rows, int cols>
  static void tile(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
    with_tile_form(w[0], [&](auto nvfp4, auto checkpoint_order) {
      int8_tile_avx2<rows, cols, decltype(nvfp4)::value, decltype(checkpoint_order)::value>(x, t, w, out);
    });
  }
};

// One block of quantize_rows with its work inlined: the codes as quantize_block_avx512, the
// scale by one 4-float store and the lane offsets from the block's int32 codes (each 128-bit
// lane summed by two in-lane shuffles, the four sums gathered by one permute), instead of a
// call per block and scalar sums over the stored bytes: a quantization of a 1024-wide x is on
// the critical path of every batch-1 linear (docs/perf/cpu-roofline.md).
struct QuantizeBlockAvx512 {
  MOERT_AVX512 void operator()(const float* x16, int8_t* codes16, float* scales4, int32_t* offsets4) const {
    const __m512 v = _mm512_loadu_ps(x16);
    const __m512 magnitude = _mm512_abs_ps(v);
    if (_mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ) != 0xFFFF) {
      _mm_storeu_ps(scales4, _mm_set1_ps(quantize_block_avx512(x16, codes16)));  // NaN; codes and offsets 0
      return;
    }
    const float amax = _mm512_reduce_max_ps(magnitude);
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(inv)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes16), _mm512_cvtsepi32_epi8(q));
    _mm_storeu_ps(scales4, _mm_set1_ps(0.5f * (amax / 127.0f)));
    __m512i sum = _mm512_add_epi32(q, _mm512_shuffle_epi32(q, _MM_PERM_CDAB));
    sum = _mm512_add_epi32(sum, _mm512_shuffle_epi32(sum, _MM_PERM_BADC));
    const __m512i lane_sums = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    const __m128i four = _mm512_castsi512_si128(_mm512_permutexvar_epi32(lane_sums, sum));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(offsets4), _mm_mullo_epi32(four, _mm_set1_epi32(-kWeightOffset)));
  }
};

// As QuantizeBlockAvx512: the codes by quantize_block_avx2, the lane offsets from their two
// int32 halves (lanes 0-1 and 2-3).
struct QuantizeBlockAvx2 {
  MOERT_AVX2 void operator()(const float* x16, int8_t* codes16, float* scales4, int32_t* offsets4) const {
    _mm_storeu_ps(scales4, _mm_set1_ps(quantize_block_avx2(x16, codes16)));
    // The 16 codes again as int32 (the store above saturated nothing: |code| <= 127).
    const __m256i q0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes16)));
    const __m256i q1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes16 + 8)));
    __m256i s0 = _mm256_add_epi32(q0, _mm256_shuffle_epi32(q0, 0xB1));
    __m256i s1 = _mm256_add_epi32(q1, _mm256_shuffle_epi32(q1, 0xB1));
    s0 = _mm256_add_epi32(s0, _mm256_shuffle_epi32(s0, 0x4E));  // element 0: lane 0's sum, 4: lane 1's
    s1 = _mm256_add_epi32(s1, _mm256_shuffle_epi32(s1, 0x4E));  // element 0: lane 2's sum, 4: lane 3's
    const __m256i four = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi32(s0, s1), _mm256_set_epi32(0, 0, 0, 0, 5, 1, 4, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(offsets4),
                     _mm_mullo_epi32(_mm256_castsi256_si128(four), _mm_set1_epi32(-kWeightOffset)));
  }
};

}  // namespace

MOERT_AVX512 void quantize_int8_rows_avx512(const float* x, int64_t rows, int64_t cols, int8_t* codes,
                                            float* lane_scales, int32_t* lane_offsets) {
  for_each_x_block(x, rows, cols, codes, lane_scales, lane_offsets, QuantizeBlockAvx512{});
}

MOERT_AVX2 void quantize_int8_rows_avx2(const float* x, int64_t rows, int64_t cols, int8_t* codes, float* lane_scales,
                                        int32_t* lane_offsets) {
  for_each_x_block(x, rows, cols, codes, lane_scales, lane_offsets, QuantizeBlockAvx2{});
}

void int8_linear_rows_avx512_vnni(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                                  int64_t begin, int64_t end) {
  int8_forward_rows<Avx512Int8Kernel<true>>(x, w, bias, y, begin, end);
}

void int8_linear_rows_avx512(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                             int64_t begin, int64_t end) {
  int8_forward_rows<Avx512Int8Kernel<false>>(x, w, bias, y, begin, end);
}

void int8_linear_rows_avx2(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end) {
  int8_forward_rows<Avx2Int8Kernel>(x, w, bias, y, begin, end);
}

}  // namespace moert::quant::x86
