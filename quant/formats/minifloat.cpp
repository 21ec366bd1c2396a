#include "quant/formats/minifloat.h"

#include <cmath>

namespace moert::quant {
namespace {

// Rounds a finite a >= 0 to the grid of a format with `man_bits` mantissa bits and the given
// exponent bias (subnormals included, no upper exponent limit), ties to even, and returns the
// magnitude code ((exp_field << man_bits) | man_field). The code may exceed the format's
// largest finite code; callers apply their own overflow rule.
//
// Within the binade of exponent e (e clamped below to the subnormal exponent emin = 1 - bias)
// the grid spacing is 2^(e - man_bits), so n = a / spacing is an exact float and the code is
// ((e - emin) << man_bits) + round_even(n): for e == emin that is n itself (subnormal when
// n < 2^man_bits); above, the implicit leading one cancels against the exponent offset, and a
// round-up to n == 2^(man_bits + 1) carries into the next binade.
uint32_t round_magnitude(float a, int man_bits, int bias) {
  if (a == 0.0f) return 0;
  const int emin = 1 - bias;
  int e = floor_log2(a);
  if (e < emin) e = emin;
  const float y = std::ldexp(a, man_bits - e);  // exact: a power-of-two rescale
  const float whole = std::floor(y);
  const float frac = y - whole;  // exact: y < 2^(man_bits + 1)
  auto n = static_cast<uint32_t>(whole);
  if (frac > 0.5f || (frac == 0.5f && (n & 1u))) ++n;
  return (static_cast<uint32_t>(e - emin) << man_bits) + n;
}

uint8_t sign_bit8(float x) { return std::signbit(x) ? 0x80 : 0x00; }

}  // namespace

int floor_log2(float x) {
  int e = 0;
  std::frexp(x, &e);  // |x| = m * 2^e, m in [0.5, 1)
  return e - 1;
}

uint8_t e2m1_encode(float x) {
  // ModelOpt `_cast_fp4`: sign_bit = (x < 0); searchsorted puts NaN above every bound.
  if (std::isnan(x)) return 0x7;
  const uint8_t sign = x < 0.0f ? 0x8 : 0x0;
  const float a = std::fabs(x);
  if (a >= kE2m1Max) return sign | 0x7;
  return static_cast<uint8_t>(sign | round_magnitude(a, 1, 1));
}

uint8_t e4m3_encode(float x) {
  if (std::isnan(x)) return kE4m3NaN;
  const float a = std::fmin(std::fabs(x), kE4m3Max);  // satfinite: clamp before rounding
  return static_cast<uint8_t>(sign_bit8(x) | round_magnitude(a, 3, 7));
}

uint8_t e5m2_encode(float x) {
  if (std::isnan(x)) return kE5m2NaN;
  const float a = std::fabs(x);
  if (std::isinf(a)) return sign_bit8(x) | 0x7C;
  const uint32_t code = round_magnitude(a, 2, 15);
  return static_cast<uint8_t>(sign_bit8(x) | (code > 0x7B ? 0x7Cu : code));
}

uint8_t e5m2_encode_satfinite(float x) {
  if (std::isnan(x)) return kE5m2NaN;
  const float a = std::fmin(std::fabs(x), kE5m2Max);
  return static_cast<uint8_t>(sign_bit8(x) | round_magnitude(a, 2, 15));
}

uint8_t e8m0_from_exponent(int exponent) {
  if (exponent > kE8m0Bias) return kE8m0NaN;
  if (exponent < -kE8m0Bias) exponent = -kE8m0Bias;
  return static_cast<uint8_t>(exponent + kE8m0Bias);
}

uint8_t e8m0_encode(float x, E8m0Rounding rounding) {
  if (std::isnan(x) || x < 0.0f || std::isinf(x)) return kE8m0NaN;
  if (x == 0.0f) return 0x00;
  int e = floor_log2(x);
  if (rounding == E8m0Rounding::kCeil && std::ldexp(1.0f, e) != x) ++e;
  return e8m0_from_exponent(e);
}

}  // namespace moert::quant
