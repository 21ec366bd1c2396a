// Scalar codecs against values computed here from the bit layout (in double, with ldexp),
// and against the values listed in docs/quant-formats.md §1a, §2a, §3a.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "quant/formats/minifloat.h"

namespace moert::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Value of an IEEE-style code with `man_bits` mantissa bits and exponent bias `bias`
// (Inf/NaN not handled), computed in double.
double layout_value(uint32_t code, int exp_bits, int man_bits, int bias) {
  const bool negative = (code >> (exp_bits + man_bits)) & 1u;
  const int exp_field = static_cast<int>((code >> man_bits) & ((1u << exp_bits) - 1));
  const int man_field = static_cast<int>(code & ((1u << man_bits) - 1));
  const double mag = exp_field == 0 ? std::ldexp(man_field, 1 - bias - man_bits)
                                    : std::ldexp((1 << man_bits) + man_field, exp_field - bias - man_bits);
  return negative ? -mag : mag;
}

// The same value as a float must also carry the sign of zero.
void expect_same_float(float actual, double expected, uint32_t code) {
  EXPECT_EQ(static_cast<double>(actual), expected) << "code 0x" << std::hex << code;
  EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << "code 0x" << std::hex << code;
}

// ---- E2M1 ---------------------------------------------------------------------------------

TEST(E2m1, AllSixteenCodesDecodeToTheLayoutAndTheSpecList) {
  const float spec[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};  // §1a
  for (uint32_t c = 0; c < 16; ++c) {
    expect_same_float(e2m1_decode(static_cast<uint8_t>(c)), layout_value(c, 2, 1, 1), c);
    EXPECT_EQ(e2m1_decode(static_cast<uint8_t>(c)), spec[c]);
    if (c != 0x8) {
      EXPECT_EQ(e2m1_encode(spec[c]), c) << c;  // -0.0 encodes as 0x0 (ModelOpt), tested below
    }
  }
  EXPECT_EQ(e2m1_decode(0xF7), 6.0f);  // only the low nibble counts
}

TEST(E2m1, MidpointsTieToEvenAsModelOpt) {
  // §1a: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
  const float midpoint[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const uint8_t tie_code[7] = {0, 2, 2, 4, 4, 6, 6};
  for (int i = 0; i < 7; ++i) {
    const float m = midpoint[i];
    EXPECT_EQ(e2m1_encode(m), tie_code[i]) << m;
    EXPECT_EQ(e2m1_encode(-m), tie_code[i] | 0x8) << -m;
    // Either side of the midpoint goes to the nearer neighbour (codes i and i + 1).
    EXPECT_EQ(e2m1_encode(std::nextafter(m, 0.0f)), i) << m;
    EXPECT_EQ(e2m1_encode(std::nextafter(m, kInf)), i + 1) << m;
    EXPECT_EQ(e2m1_encode(-std::nextafter(m, kInf)), (i + 1) | 0x8) << m;
  }
}

TEST(E2m1, SaturatesAtSixAndHandlesSpecialValues) {
  EXPECT_EQ(e2m1_encode(6.0f), 0x7);
  EXPECT_EQ(e2m1_encode(6.5f), 0x7);
  EXPECT_EQ(e2m1_encode(7.99f), 0x7);
  EXPECT_EQ(e2m1_encode(1e30f), 0x7);
  EXPECT_EQ(e2m1_encode(kInf), 0x7);
  EXPECT_EQ(e2m1_encode(-kInf), 0xF);
  EXPECT_EQ(e2m1_encode(-100.0f), 0xF);
  EXPECT_EQ(e2m1_encode(0.0f), 0x0);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x0);  // sign bit = (x < 0)
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8);  // rounds to -0
  EXPECT_EQ(e2m1_encode(1e-40f), 0x0);
  EXPECT_EQ(e2m1_encode(kNaN), 0x7);  // ModelOpt's searchsorted: NaN above every bound
}

TEST(E2m1, EncodeIsNearestValue) {
  // Dense sweep over [-7, 7]: the chosen value is never farther than any other code's.
  for (int i = -7000; i <= 7000; ++i) {
    const float x = static_cast<float>(i) * 0.001f;
    const float got = e2m1_decode(e2m1_encode(x));
    for (int c = 0; c < 16; ++c) {
      ASSERT_LE(std::fabs(got - x), std::fabs(kE2m1Values[c] - x)) << x;
    }
  }
}

// ---- E4M3 ---------------------------------------------------------------------------------

double e4m3_layout(uint32_t c) {
  if ((c & 0x7F) == 0x7F) return std::numeric_limits<double>::quiet_NaN();  // S.1111.111
  return layout_value(c, 4, 3, 7);
}

TEST(E4m3, AllBytesDecodeToTheLayout) {
  int num_nan = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = e4m3_decode(static_cast<uint8_t>(c));
    const double expected = e4m3_layout(c);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(v)) << c;
      ++num_nan;
      continue;
    }
    expect_same_float(v, expected, c);
    EXPECT_FALSE(std::isinf(v));
  }
  EXPECT_EQ(num_nan, 2);  // 0x7F and 0xFF only
  // §3a spot checks.
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);  // max, S.1111.110
  EXPECT_EQ(e4m3_decode(0xFE), -448.0f);
  EXPECT_EQ(e4m3_decode(0x78), 256.0f);  // exponent 1111 is a normal binade
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
  EXPECT_EQ(kE4m3Max, 448.0f);
}

TEST(E4m3, EveryCodeRoundTrips) {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_encode(e4m3_decode(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E4m3, MidpointsTieToEven) {
  // Every pair of neighbouring finite codes c, c + 1 of both signs (0x00..0x7E).
  for (uint32_t c = 0; c < 0x7E; ++c) {
    for (const uint32_t sign : {0x00u, 0x80u}) {
      const float lo = e4m3_decode(static_cast<uint8_t>(sign | c));
      const float hi = e4m3_decode(static_cast<uint8_t>(sign | (c + 1)));
      const float mid = (lo + hi) / 2.0f;  // exact: 4 significant bits at most
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2.0);
      const uint32_t even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(e4m3_encode(mid), sign | even) << "mid " << mid;
      EXPECT_EQ(e4m3_encode(std::nextafter(mid, lo)), sign | c) << "below " << mid;
      EXPECT_EQ(e4m3_encode(std::nextafter(mid, hi)), sign | (c + 1)) << "above " << mid;
    }
  }
}

TEST(E4m3, SaturatesAndMapsNaN) {
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(463.99f), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);  // would tie up to "480" (the NaN code): satfinite
  EXPECT_EQ(e4m3_encode(480.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(1e30f), 0x7E);
  EXPECT_EQ(e4m3_encode(-1e30f), 0xFE);
  EXPECT_EQ(e4m3_encode(kInf), 0x7E);
  EXPECT_EQ(e4m3_encode(-kInf), 0xFE);
  EXPECT_EQ(e4m3_encode(kNaN), kE4m3NaN);
  EXPECT_EQ(e4m3_encode(-kNaN), kE4m3NaN);
  // Below the smallest subnormal: 2^-10 ties to 0; just above rounds to 2^-9.
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(e4m3_encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(e4m3_encode(std::ldexp(3.0f, -11)), 0x01);
  EXPECT_EQ(e4m3_encode(1e-40f), 0x00);
  EXPECT_EQ(e4m3_encode(-1e-40f), 0x80);
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
}

// ---- E5M2 ---------------------------------------------------------------------------------

TEST(E5m2, AllBytesDecodeToTheLayout) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = e5m2_decode(static_cast<uint8_t>(c));
    const uint32_t exp_field = (c >> 2) & 0x1F;
    if (exp_field == 0x1F) {
      if ((c & 0x3) == 0) {
        EXPECT_TRUE(std::isinf(v)) << c;  // S.11111.00
        EXPECT_EQ(std::signbit(v), (c & 0x80) != 0);
      } else {
        EXPECT_TRUE(std::isnan(v)) << c;  // S.11111.{01,10,11}
      }
      continue;
    }
    expect_same_float(v, layout_value(c, 5, 2, 15), c);
  }
  EXPECT_EQ(e5m2_decode(0x7B), 57344.0f);  // max
  EXPECT_EQ(e5m2_decode(0x04), std::ldexp(1.0f, -14));  // min normal
  EXPECT_EQ(e5m2_decode(0x01), std::ldexp(1.0f, -16));  // min subnormal
  EXPECT_EQ(e5m2_decode(0x3C), 1.0f);
  EXPECT_EQ(e5m2_decode(0x7C), kInf);
  EXPECT_EQ(e5m2_decode(0xFC), -kInf);
}

TEST(E5m2, EveryCodeRoundTripsAndMidpointsTieToEven) {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) > 0x7C) continue;  // NaNs
    EXPECT_EQ(e5m2_encode(e5m2_decode(static_cast<uint8_t>(c))), c) << c;
  }
  for (uint32_t c = 0; c < 0x7B; ++c) {
    for (const uint32_t sign : {0x00u, 0x80u}) {
      const float lo = e5m2_decode(static_cast<uint8_t>(sign | c));
      const float hi = e5m2_decode(static_cast<uint8_t>(sign | (c + 1)));
      const float mid = (lo + hi) / 2.0f;
      const uint32_t even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(e5m2_encode(mid), sign | even) << mid;
      EXPECT_EQ(e5m2_encode(std::nextafter(mid, lo)), sign | c) << mid;
      EXPECT_EQ(e5m2_encode(std::nextafter(mid, hi)), sign | (c + 1)) << mid;
      EXPECT_EQ(e5m2_encode_satfinite(mid), sign | even) << mid;
    }
  }
}

TEST(E5m2, OverflowGoesToInfOrSaturates) {
  // 61440 is the midpoint between 57344 (mantissa 11, odd) and 2^16: ties to even = Inf.
  EXPECT_EQ(e5m2_encode(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(e5m2_encode(61440.0f), 0x7C);
  EXPECT_EQ(e5m2_encode(-1e30f), 0xFC);
  EXPECT_EQ(e5m2_encode(kInf), 0x7C);
  EXPECT_EQ(e5m2_encode(-kInf), 0xFC);
  EXPECT_EQ(e5m2_encode(kNaN), kE5m2NaN);
  EXPECT_TRUE(std::isnan(e5m2_decode(kE5m2NaN)));
  EXPECT_EQ(e5m2_encode_satfinite(61440.0f), 0x7B);
  EXPECT_EQ(e5m2_encode_satfinite(1e30f), 0x7B);
  EXPECT_EQ(e5m2_encode_satfinite(-kInf), 0xFB);
  EXPECT_EQ(e5m2_encode_satfinite(kNaN), kE5m2NaN);
  EXPECT_EQ(e5m2_encode(std::ldexp(1.0f, -17)), 0x00);  // half the min subnormal ties to 0
  EXPECT_EQ(e5m2_encode(std::ldexp(3.0f, -18)), 0x01);
}

// ---- E8M0 ---------------------------------------------------------------------------------

TEST(E8m0, AllBytesDecodeToPowersOfTwo) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(static_cast<double>(e8m0_decode(static_cast<uint8_t>(c))), std::ldexp(1.0, c - 127)) << c;
  }
  EXPECT_TRUE(std::isnan(e8m0_decode(0xFF)));
  EXPECT_EQ(e8m0_decode(127), 1.0f);
  EXPECT_EQ(e8m0_decode(0), std::ldexp(1.0f, -127));  // a float subnormal, still exact
  EXPECT_EQ(e8m0_decode(254), std::ldexp(1.0f, 127));
}

TEST(E8m0, ExponentRuleClampsBelowAndIsNaNAbove) {
  EXPECT_EQ(e8m0_from_exponent(0), 127);
  EXPECT_EQ(e8m0_from_exponent(-2), 125);
  EXPECT_EQ(e8m0_from_exponent(127), 254);
  EXPECT_EQ(e8m0_from_exponent(128), kE8m0NaN);  // §2a: > 127 -> NaN
  EXPECT_EQ(e8m0_from_exponent(-127), 0);
  EXPECT_EQ(e8m0_from_exponent(-128), 0);  // §2a: < -127 -> -127
  EXPECT_EQ(e8m0_from_exponent(-1000), 0);
}

TEST(E8m0, EncodeFloorAndCeil) {
  EXPECT_EQ(e8m0_encode(1.0f, E8m0Rounding::kFloor), 127);
  EXPECT_EQ(e8m0_encode(1.0f, E8m0Rounding::kCeil), 127);
  EXPECT_EQ(e8m0_encode(1.5f, E8m0Rounding::kFloor), 127);
  EXPECT_EQ(e8m0_encode(1.5f, E8m0Rounding::kCeil), 128);
  EXPECT_EQ(e8m0_encode(0.75f, E8m0Rounding::kFloor), 126);
  EXPECT_EQ(e8m0_encode(0.75f, E8m0Rounding::kCeil), 127);
  EXPECT_EQ(e8m0_encode(std::nextafter(2.0f, 0.0f), E8m0Rounding::kFloor), 127);
  EXPECT_EQ(e8m0_encode(std::nextafter(2.0f, 4.0f), E8m0Rounding::kCeil), 129);
  EXPECT_EQ(e8m0_encode(1e-45f, E8m0Rounding::kFloor), 0);  // 2^-149 clamps to 2^-127
  EXPECT_EQ(e8m0_encode(0.0f, E8m0Rounding::kFloor), 0);
  EXPECT_EQ(e8m0_encode(3e38f, E8m0Rounding::kFloor), 254);
  EXPECT_EQ(e8m0_encode(3e38f, E8m0Rounding::kCeil), kE8m0NaN);  // 2^128
  EXPECT_EQ(e8m0_encode(kInf, E8m0Rounding::kFloor), kE8m0NaN);
  EXPECT_EQ(e8m0_encode(kNaN, E8m0Rounding::kFloor), kE8m0NaN);
  EXPECT_EQ(e8m0_encode(-1.0f, E8m0Rounding::kFloor), kE8m0NaN);
}

TEST(FloorLog2, ExactIncludingSubnormals) {
  EXPECT_EQ(floor_log2(1.0f), 0);
  EXPECT_EQ(floor_log2(std::nextafter(1.0f, 0.0f)), -1);
  EXPECT_EQ(floor_log2(7.99f), 2);
  EXPECT_EQ(floor_log2(-8.0f), 3);
  EXPECT_EQ(floor_log2(std::ldexp(1.0f, -149)), -149);
  EXPECT_EQ(floor_log2(std::ldexp(3.0f, -140)), -139);
  EXPECT_EQ(floor_log2(std::numeric_limits<float>::max()), 127);
}

}  // namespace
}  // namespace moert::quant
