// Scalar codecs for the narrow float formats used by quantized checkpoints (spec:
// docs/quant-formats.md §1a, §2a, §3a). A code is the raw bit pattern, held in the low
// bits of a uint8_t.
//
//   format  bits        bias  max    min subnormal  Inf            NaN
//   E2M1    s ee m      1     6      0.5            none           none
//   E4M3    s eeee mmm  7     448    2^-9           none           S.1111.111 (0x7F/0xFF)
//   E5M2    s eeeee mm  15    57344  2^-16          S.11111.00     S.11111.{01,10,11}
//   E8M0    eeeeeeee    127   2^127  (2^-127 min)   none           0xFF; no sign, no zero
//
// Every encoder rounds to nearest, ties to even (on the value grid, i.e. to the code whose
// lowest bit is 0). The decode tables are exact: every code's value is a float.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

namespace moert::quant {

namespace minifloat_detail {
// 2^e as a float by repeated halving/doubling (usable in constant expressions).
constexpr float exp2i(int e) {
  float v = 1.0f;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v *= 0.5f;
  return v;
}
// Value of sign/exponent/mantissa fields of an IEEE-style format without Inf/NaN handling.
constexpr float field_value(bool negative, int exp_field, int man_field, int man_bits, int bias) {
  const float one_ulp = exp2i(-man_bits);
  const float mag = exp_field == 0 ? exp2i(1 - bias) * (static_cast<float>(man_field) * one_ulp)
                                   : exp2i(exp_field - bias) * (1.0f + static_cast<float>(man_field) * one_ulp);
  return negative ? -mag : mag;
}
constexpr std::array<float, 16> make_e2m1_table() {
  std::array<float, 16> t{};
  for (int c = 0; c < 16; ++c) t[c] = field_value(c & 0x8, (c >> 1) & 0x3, c & 0x1, 1, 1);
  return t;
}
constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    // §3a: exponent 1111 is a normal binade except mantissa 111, the only NaN.
    t[c] = (c & 0x7F) == 0x7F ? std::numeric_limits<float>::quiet_NaN()
                              : field_value(c & 0x80, (c >> 3) & 0xF, c & 0x7, 3, 7);
  }
  return t;
}
constexpr std::array<float, 256> make_e5m2_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int exp_field = (c >> 2) & 0x1F;
    const int man_field = c & 0x3;
    if (exp_field == 0x1F) {
      const float inf = std::numeric_limits<float>::infinity();
      t[c] = man_field != 0 ? std::numeric_limits<float>::quiet_NaN() : ((c & 0x80) ? -inf : inf);
    } else {
      t[c] = field_value(c & 0x80, exp_field, man_field, 2, 15);
    }
  }
  return t;
}
constexpr std::array<float, 256> make_e8m0_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 255; ++c) t[c] = exp2i(c - 127);
  t[255] = std::numeric_limits<float>::quiet_NaN();
  return t;
}
}  // namespace minifloat_detail

// ---- E2M1 (FP4; NVFP4 and MXFP4 elements) -------------------------------------------------
// Codes 0..7 -> 0, 0.5, 1, 1.5, 2, 3, 4, 6; 8..15 the same negated (0x8 = -0).
inline constexpr std::array<float, 16> kE2m1Values = minifloat_detail::make_e2m1_table();
inline constexpr float kE2m1Max = 6.0f;

inline float e2m1_decode(uint8_t code) { return kE2m1Values[code & 0xF]; }
// Matches ModelOpt `_cast_fp4` (spec §1a) bit for bit: RNE on the midpoints 0.25, 0.75,
// 1.25, 1.75, 2.5, 3.5, 5; |x| > 6 (and +-Inf) saturates to 6; the sign bit is (x < 0), so
// -0.0 -> 0x0 while -0.1 -> 0x8. E2M1 has no NaN (§1d leaves it undefined); NaN -> 0x7 (+6),
// which is what ModelOpt's searchsorted yields (NaN sorts last). Quantizers reject NaN before
// calling this.
uint8_t e2m1_encode(float x);

// ---- FP8 E4M3 (float8_e4m3fn) ---------------------------------------------------------------
inline constexpr std::array<float, 256> kE4m3Values = minifloat_detail::make_e4m3_table();
inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3NaN = 0x7F;

inline float e4m3_decode(uint8_t code) { return kE4m3Values[code]; }
// RNE, saturating like CUDA's __NV_SATFINITE conversion (§3a): finite overflow and +-Inf ->
// +-448 (0x7E/0xFE); NaN -> 0x7F. The sign of zero is kept (-0.0 -> 0x80).
uint8_t e4m3_encode(float x);

// ---- FP8 E5M2 (float8_e5m2) -----------------------------------------------------------------
inline constexpr std::array<float, 256> kE5m2Values = minifloat_detail::make_e5m2_table();
inline constexpr float kE5m2Max = 57344.0f;
inline constexpr uint8_t kE5m2NaN = 0x7F;

inline float e5m2_decode(uint8_t code) { return kE5m2Values[code]; }
// IEEE-style RNE (PyTorch cast, §3a): results beyond 57344 after rounding (|x| >= 61440, the
// tie rounding to even = Inf) and +-Inf -> +-Inf (0x7C/0xFC); NaN -> 0x7F.
uint8_t e5m2_encode(float x);
// The __NV_SATFINITE variant: overflow and +-Inf -> +-57344 (0x7B/0xFB); NaN -> 0x7F.
uint8_t e5m2_encode_satfinite(float x);

// ---- E8M0 (MX block scale; §2a) -------------------------------------------------------------
// X = 2^(E - 127); E = 0xFF is NaN. No sign, zero or Inf.
inline constexpr std::array<float, 256> kE8m0Values = minifloat_detail::make_e8m0_table();
inline constexpr int kE8m0Bias = 127;
inline constexpr uint8_t kE8m0NaN = 0xFF;

inline float e8m0_decode(uint8_t code) { return kE8m0Values[code]; }
// The code of 2^exponent under the OCP rule: exponent > 127 -> NaN (0xFF); exponent < -127
// clamps to -127 (0x00).
uint8_t e8m0_from_exponent(int exponent);

enum class E8m0Rounding {
  kFloor,  // 2^floor(log2 x): the OCP shared-exponent rule
  kCeil,   // 2^ceil(log2 x): TRT-LLM's cudaRoundPosInf
};
// Encodes a positive scale as a power of two (via e8m0_from_exponent). x == 0 -> 0x00
// (2^-127, the smallest); NaN, negative and +Inf -> 0xFF.
uint8_t e8m0_encode(float x, E8m0Rounding rounding);

// floor(log2 |x|) for finite nonzero x, exact (float subnormals included).
int floor_log2(float x);

}  // namespace moert::quant
