// NVFP4 and MXFP4 quantize/dequantize: exact codes, scales and nibble order on hand-built
// matrices, the edge cases of docs/quant-formats.md §1d and §2a, and round-trip
// relative MSE against the simulation in §5b.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "quant/formats/fp4.h"
#include "quant/formats/minifloat.h"
#include "tests/quant/formats/sample_data.h"

namespace moert::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int64_t kMseRows = 512;  // 512 x 512 = 2^18 samples, as in §5b
constexpr int64_t kMseCols = 512;

uint8_t code_at(const std::vector<uint8_t>& packed, int64_t k) {
  return (k % 2 == 0) ? (packed[k / 2] & 0xF) : (packed[k / 2] >> 4);
}

// True when `code` is a nearest E2M1 value to y (ties are checked separately).
bool is_nearest_e2m1(uint8_t code, float y) {
  const float yc = std::fmin(std::fabs(y), 6.0f);
  const float got = std::fabs(e2m1_decode(code));
  for (int c = 0; c < 8; ++c) {
    if (std::fabs(kE2m1Values[c] - yc) < std::fabs(got - yc)) return false;
  }
  return true;
}

// ---- NVFP4 --------------------------------------------------------------------------------

TEST(Nvfp4, RejectsBadShapesAndNaN) {
  std::vector<float> x(48, 1.0f);
  auto r = nvfp4_quantize(x.data(), 2, 24);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cols = 24"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(nvfp4_quantize(x.data(), -1, 16).is_ok());
  EXPECT_FALSE(nvfp4_quantize(nullptr, 1, 16).is_ok());
  EXPECT_TRUE(nvfp4_quantize(nullptr, 0, 16).is_ok());
  x[21] = kNaN;
  r = nvfp4_quantize(x.data(), 3, 16);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("x[1, 5] is NaN"), std::string::npos) << r.status().to_string();
}

TEST(Nvfp4, ExactCodesScalesAndLowNibbleFirst) {
  // amax 6 => global_scale = 6 / 2688, block scale 448 (0x7E), x / (448 * gs) ~= x.
  const std::vector<float> x = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -6, -4, -3, -2, -1.5f, -1, -0.5f, 0};
  auto r = nvfp4_quantize(x.data(), 1, 16);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Nvfp4Tensor& t = *r;
  EXPECT_EQ(t.global_scale, 6.0f / 2688.0f);
  ASSERT_EQ(t.block_scales.size(), 1u);
  EXPECT_EQ(t.block_scales[0], 0x7E);
  const std::vector<uint8_t> expected = {0x10, 0x32, 0x54, 0x76, 0xEF, 0xCD, 0xAB, 0x09};
  EXPECT_EQ(t.packed, expected);
  std::vector<float> y(16);
  nvfp4_dequantize(t, y.data());
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(y[i], x[i], 1e-6f) << i;
}

TEST(Nvfp4, ScalesAndCodesFollowTheModelOptFormula) {
  const std::vector<float> x = test::normal_samples(64 * 256, 7);
  auto r = nvfp4_quantize(x.data(), 64, 256);
  ASSERT_TRUE(r.is_ok());
  float amax = 0.0f;
  for (float v : x) amax = std::fmax(amax, std::fabs(v));
  EXPECT_EQ(r->global_scale, amax / 2688.0f);
  for (int64_t b = 0; b < 64 * 256 / 16; ++b) {
    float amax_blk = 0.0f;
    for (int i = 0; i < 16; ++i) amax_blk = std::fmax(amax_blk, std::fabs(x[b * 16 + i]));
    const float s = amax_blk / (6.0f * r->global_scale);
    const uint8_t sc = r->block_scales[b];
    ASSERT_LE(sc, 0x7E);
    // The scale byte is a nearest E4M3 value to s (RNE ties are covered by the E4M3 tests).
    const float d = e4m3_decode(sc);
    if (sc > 0) {
      EXPECT_LE(std::fabs(d - s), std::fabs(e4m3_decode(sc - 1) - s)) << b;
    }
    if (sc < 0x7E) {
      EXPECT_LE(std::fabs(d - s), std::fabs(e4m3_decode(sc + 1) - s)) << b;
    }
    const float denom = d * r->global_scale;
    for (int i = 0; i < 16; ++i) {
      const float xv = x[b * 16 + i];
      const uint8_t code = code_at(r->packed, b * 16 + i);
      ASSERT_TRUE(is_nearest_e2m1(code, xv / denom)) << b << " " << i;
      ASSERT_EQ((code & 0x8) != 0, xv < 0.0f) << b << " " << i;
    }
  }
}

TEST(Nvfp4, ZeroBlockStoresScaleOne) {
  std::vector<float> x(32, 0.0f);
  for (int i = 16; i < 32; ++i) x[i] = static_cast<float>(i - 20);
  auto r = nvfp4_quantize(x.data(), 1, 32);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->block_scales[0], 0x38);  // §1d: ModelOpt stores 1.0
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r->packed[i], 0x00) << i;
  std::vector<float> y(32);
  nvfp4_dequantize(*r, y.data());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 0.0f);
}

TEST(Nvfp4, TinyBlockClampsScaleToMinSubnormal) {
  std::vector<float> x(32, 0.0f);
  x[0] = 1e-6f;     // block 0: s = 1e-6 / (6 * 100 / 2688) ~ 4.5e-6 < 2^-9
  x[1] = -1e-6f;
  x[16] = 100.0f;   // block 1 sets the tensor amax
  auto r = nvfp4_quantize(x.data(), 1, 32);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->block_scales[0], 0x01);  // 2^-9, not 0x00
  EXPECT_EQ(r->block_scales[1], 0x7E);
  EXPECT_EQ(r->packed[0], 0x80);  // +0 low, -0 high: sign of a value that rounds to zero is kept
  EXPECT_EQ(code_at(r->packed, 16), 0x7);
}

TEST(Nvfp4, AllZeroTensorDecodesToZero) {
  const std::vector<float> x(64, 0.0f);
  auto r = nvfp4_quantize(x.data(), 2, 32);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->global_scale, 0.0f);
  for (uint8_t s : r->block_scales) EXPECT_EQ(s, 0x38);
  for (uint8_t p : r->packed) EXPECT_EQ(p, 0x00);
  std::vector<float> y(64, kNaN);
  nvfp4_dequantize(*r, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Nvfp4, InfIsLeftOutOfAmaxAndSaturates) {
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[1] = -2.0f;
  x[3] = kInf;
  x[17] = -kInf;  // block 1 has no finite nonzero value
  auto r = nvfp4_quantize(x.data(), 1, 32);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->global_scale, 2.0f / 2688.0f);
  EXPECT_EQ(r->block_scales[0], 0x7E);
  EXPECT_EQ(code_at(r->packed, 3), 0x7);
  EXPECT_EQ(r->block_scales[1], 0x38);
  EXPECT_EQ(code_at(r->packed, 17), 0xF);
  std::vector<float> y(32);
  nvfp4_dequantize(*r, y.data());
  EXPECT_NEAR(y[3], 2.0f, 1e-5f);  // ~ the block's finite amax
  EXPECT_NEAR(y[1], -2.0f, 1e-5f);
  EXPECT_EQ(y[17], -6.0f * r->global_scale);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
}

TEST(Nvfp4, GivenGlobalScaleClampsBlockScaleAt448) {
  std::vector<float> x(16, 0.0f);
  x[0] = 100.0f;  // s = 100 / (6 * 0.01) ~ 1667 -> 448; 100 / 4.48 -> saturates at 6
  x[1] = 0.9f;    // 0.9 / 4.48 ~ 0.2 -> 0
  auto r = nvfp4_quantize_with_global_scale(x.data(), 1, 16, 0.01f);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->global_scale, 0.01f);
  EXPECT_EQ(r->block_scales[0], 0x7E);
  EXPECT_EQ(r->packed[0], 0x07);
  for (float bad : {0.0f, -1.0f, kInf, kNaN}) {
    EXPECT_FALSE(nvfp4_quantize_with_global_scale(x.data(), 1, 16, bad).is_ok()) << bad;
  }
}

TEST(Nvfp4, DequantizeMatchesTheModelOptFormula) {
  // Raw buffers: every code against every scale byte in turn.
  std::vector<uint8_t> packed(128), scales(16);
  for (int i = 0; i < 128; ++i) packed[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int b = 0; b < 16; ++b) scales[b] = static_cast<uint8_t>(b * 8 + 3);
  const float gs = 0.0123f;
  std::vector<float> y(256);
  nvfp4_dequantize(packed.data(), scales.data(), gs, 4, 64, y.data());
  for (int k = 0; k < 256; ++k) {
    const uint8_t code = (k % 2 == 0) ? (packed[k / 2] & 0xF) : (packed[k / 2] >> 4);
    EXPECT_EQ(y[k], kE2m1Values[code] * (kE4m3Values[scales[k / 16]] * gs)) << k;
  }
}

TEST(Nvfp4, ValidateChecksSizes) {
  Nvfp4Tensor t;
  t.rows = 2;
  t.cols = 32;
  t.packed.resize(32);
  t.block_scales.resize(4);
  EXPECT_TRUE(nvfp4_validate(t).is_ok());
  t.block_scales.resize(3);
  EXPECT_FALSE(nvfp4_validate(t).is_ok());
  t.block_scales.resize(4);
  t.cols = 30;
  EXPECT_FALSE(nvfp4_validate(t).is_ok());
}

double nvfp4_round_trip_mse(const std::vector<float>& x) {
  auto r = nvfp4_quantize(x.data(), kMseRows, kMseCols);
  EXPECT_TRUE(r.is_ok());
  std::vector<float> y(x.size());
  nvfp4_dequantize(*r, y.data());
  return test::relative_mse(x, y);
}

TEST(Nvfp4, RoundTripRelativeMseMatchesSimulation) {
  // §5b: N(0,1) 0.00904, Laplace(1) 0.00858; within 10%.
  const double normal = nvfp4_round_trip_mse(test::normal_samples(kMseRows * kMseCols, 0));
  EXPECT_NEAR(normal, 0.00904, 0.000904);
  const double laplace = nvfp4_round_trip_mse(test::laplace_samples(kMseRows * kMseCols, 0));
  EXPECT_NEAR(laplace, 0.00858, 0.000858);
  RecordProperty("nvfp4_rel_mse_normal", std::to_string(normal));
  RecordProperty("nvfp4_rel_mse_laplace", std::to_string(laplace));
}

// ---- MXFP4 --------------------------------------------------------------------------------

// One 32-wide block per entry of `amax`, each holding that value at position 0 and small
// fill elsewhere.
std::vector<float> blocks_with_amax(const std::vector<float>& amax) {
  std::vector<float> x(amax.size() * 32, 0.0f);
  for (size_t b = 0; b < amax.size(); ++b) x[b * 32] = amax[b];
  return x;
}

TEST(Mxfp4, RejectsBadShapesAndNaN) {
  std::vector<float> x(96, 1.0f);
  auto r = mxfp4_quantize(x.data(), 2, 48);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("multiple of 32"), std::string::npos);
  x[40] = kNaN;
  r = mxfp4_quantize(x.data(), 3, 32);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("x[1, 8] is NaN"), std::string::npos) << r.status().to_string();
}

TEST(Mxfp4, OcpFloorScaleRule) {
  // §2a: E = floor(log2 amax) - 2 + 127; amax 0 -> log2(FLT_MIN) - 2 -> clamped to -127.
  const float big = std::ldexp(1.5f, 100);
  const auto x = blocks_with_amax({1.0f, 7.9f, 6.5f, 0.0f, 1e-40f, big, -4.0f});
  auto r = mxfp4_quantize(x.data(), 1, static_cast<int64_t>(x.size()));
  ASSERT_TRUE(r.is_ok());
  const std::vector<uint8_t> expected_scales = {125, 127, 127, 0, 0, 225, 127};
  EXPECT_EQ(r->scales, expected_scales);
  EXPECT_EQ(code_at(r->packed, 0 * 32), 0x6);  // 1 / 2^-2 = 4
  EXPECT_EQ(code_at(r->packed, 1 * 32), 0x7);  // 7.9 in (6X, 8X) clips to 6
  EXPECT_EQ(code_at(r->packed, 2 * 32), 0x7);  // 6.5 too
  EXPECT_EQ(code_at(r->packed, 3 * 32), 0x0);
  EXPECT_EQ(code_at(r->packed, 4 * 32), 0x0);  // 1e-40 * 2^127 ~ 0.017 -> 0
  EXPECT_EQ(code_at(r->packed, 5 * 32), 0x7);  // exactly 6X
  EXPECT_EQ(code_at(r->packed, 6 * 32), 0xE);  // |-4|: floor(log2 4) - 2 = 0, so -4 / 1
}

TEST(Mxfp4, RoundUpScaleRule) {
  const auto x = blocks_with_amax({7.9f, 6.0f, 1.0f, 0.0f});
  auto r = mxfp4_quantize(x.data(), 1, static_cast<int64_t>(x.size()), Mxfp4ScaleRule::kRoundUp);
  ASSERT_TRUE(r.is_ok());
  // 7.9/6 -> 2^1; 6/6 -> 2^0; 1/6 -> 2^-2; 0 -> 2^-127.
  const std::vector<uint8_t> expected_scales = {128, 127, 125, 0};
  EXPECT_EQ(r->scales, expected_scales);
  EXPECT_EQ(code_at(r->packed, 0), 0x6);  // 3.95 -> 4: nothing clips
  EXPECT_EQ(code_at(r->packed, 32), 0x7);
  EXPECT_EQ(code_at(r->packed, 64), 0x6);
}

TEST(Mxfp4, RepresentableValuesRoundTripExactly) {
  // Each block's amax is 6 * 2^k, so X = 2^k and every E2M1 multiple of X is exact.
  std::vector<float> x(4 * 32);
  for (int b = 0; b < 4; ++b) {
    for (int i = 0; i < 32; ++i) x[b * 32 + i] = std::ldexp(kE2m1Values[(i * 5 + b) % 16], 3 * b - 4);
    x[b * 32 + 7] = std::ldexp(6.0f, 3 * b - 4);
  }
  auto r = mxfp4_quantize(x.data(), 2, 64);
  ASSERT_TRUE(r.is_ok());
  std::vector<float> y(x.size());
  mxfp4_dequantize(*r, y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i]) << i;
}

TEST(Mxfp4, DequantizeMatchesGptOssDecode) {
  // §2b: element 2j = LUT[b & 0xF], 2j+1 = LUT[b >> 4], value = ldexp(LUT, E - 127).
  const float lut[16] = {+0.0f, .5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<uint8_t> packed(4 * 16), scales(4);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i * 53 + 7);
  scales = {0, 127, 200, 0xFF};
  std::vector<float> y(128);
  mxfp4_dequantize(packed.data(), scales.data(), 2, 64, y.data());
  for (int b = 0; b < 3; ++b) {
    for (int j = 0; j < 16; ++j) {
      const uint8_t byte = packed[b * 16 + j];
      EXPECT_EQ(y[b * 32 + 2 * j], std::ldexp(lut[byte & 0xF], scales[b] - 127)) << b << " " << j;
      EXPECT_EQ(y[b * 32 + 2 * j + 1], std::ldexp(lut[byte >> 4], scales[b] - 127)) << b << " " << j;
    }
  }
  for (int k = 96; k < 128; ++k) EXPECT_TRUE(std::isnan(y[k])) << k;  // E = 0xFF
}

TEST(Mxfp4, InfSaturatesWithTheFiniteScale) {
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[5] = -kInf;
  auto r = mxfp4_quantize(x.data(), 1, 32);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->scales[0], 125);
  EXPECT_EQ(code_at(r->packed, 5), 0xF);
  std::vector<float> y(32);
  mxfp4_dequantize(*r, y.data());
  EXPECT_EQ(y[5], -1.5f);  // -6 * 2^-2
}

double mxfp4_round_trip_mse(const std::vector<float>& x, Mxfp4ScaleRule rule) {
  auto r = mxfp4_quantize(x.data(), kMseRows, kMseCols, rule);
  EXPECT_TRUE(r.is_ok());
  std::vector<float> y(x.size());
  mxfp4_dequantize(*r, y.data());
  return test::relative_mse(x, y);
}

TEST(Mxfp4, RoundTripRelativeMseMatchesSimulation) {
  // §5b: OCP floor N(0,1) 0.01315, Laplace 0.01610; round-up 0.01334, 0.01752. Within 10%.
  const auto normal = test::normal_samples(kMseRows * kMseCols, 0);
  const auto laplace = test::laplace_samples(kMseRows * kMseCols, 0);
  EXPECT_NEAR(mxfp4_round_trip_mse(normal, Mxfp4ScaleRule::kOcpFloor), 0.01315, 0.001315);
  EXPECT_NEAR(mxfp4_round_trip_mse(laplace, Mxfp4ScaleRule::kOcpFloor), 0.01610, 0.001610);
  EXPECT_NEAR(mxfp4_round_trip_mse(normal, Mxfp4ScaleRule::kRoundUp), 0.01334, 0.001334);
  EXPECT_NEAR(mxfp4_round_trip_mse(laplace, Mxfp4ScaleRule::kRoundUp), 0.01752, 0.001752);
  // And NVFP4 beats MXFP4 on the same data (§5a, §5b).
  EXPECT_LT(nvfp4_round_trip_mse(normal), 0.8 * mxfp4_round_trip_mse(normal, Mxfp4ScaleRule::kOcpFloor));
}

// The block scale is (amax / 6) / weight_scale_2 in float32, ModelOpt's order: over many
// blocks of BF16 values some E4M3 codes differ from amax / (6 * weight_scale_2), and every
// code matches the first.
TEST(Nvfp4, BlockScaleDividesBySixFirst) {
  // A tensor amax of 3.5 makes the exact scale of a block 128 * amax_blk: blocks whose amax is
  // an E4M3 midpoint / 128 have exact scales on the midpoints, where the last bit of the
  // float32 quotient (which the order of the divisions decides) picks the code.
  const float global_scale = 3.5f / (6.0f * 448.0f);
  std::vector<float> amaxes;
  for (int e = -6; e <= 7; ++e) {
    for (int m = 0; m < 8; ++m) amaxes.push_back(std::ldexp(8.0f + static_cast<float>(m) + 0.5f, e - 3) / 128.0f);
  }
  const int64_t blocks = static_cast<int64_t>(amaxes.size());
  std::vector<float> x(static_cast<size_t>(blocks * kNvfp4BlockSize), 0.0f);
  for (int64_t b = 0; b < blocks; ++b) x[static_cast<size_t>(b * kNvfp4BlockSize + b % 5)] = amaxes[static_cast<size_t>(b)];
  const Nvfp4Tensor t = nvfp4_quantize_with_global_scale(x.data(), blocks, kNvfp4BlockSize, global_scale).value();
  int differ = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const float amax = amaxes[static_cast<size_t>(b)];
    const uint8_t expected = e4m3_encode(std::clamp((amax / 6.0f) / global_scale, 0x1p-9f, 448.0f));
    const uint8_t other_order = e4m3_encode(std::clamp(amax / (6.0f * global_scale), 0x1p-9f, 448.0f));
    EXPECT_EQ(t.block_scales[static_cast<size_t>(b)], expected) << "block " << b << ", amax " << amax;
    differ += expected != other_order;
  }
  EXPECT_GT(differ, 0) << "no block tells the two orders apart: the test would not catch the other one";
}


// ---- FP4 activations ------------------------------------------------------------------------

// Rows with a wide spread of magnitudes, a zero block, a tiny block and a huge one.
std::vector<float> activation_rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> x = test::normal_samples(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(r % 7) * 6 - 18);
    for (int64_t k = 0; k < cols; ++k) x[static_cast<size_t>(r * cols + k)] *= row_scale;
  }
  for (int64_t k = 0; k < 32; ++k) {
    x[static_cast<size_t>(k)] = 0.0f;                        // row 0: a zero block (MXFP4 and NVFP4)
    x[static_cast<size_t>(cols + k)] *= 1e-30f;              // row 1: a block far below the row's amax
    x[static_cast<size_t>(2 * cols + k)] *= 1e20f;           // row 2: a block far above
  }
  return x;
}

TEST(Fp4Activations, RoundTripIsTheQuantizerThenTheDequantizerOfEachRow) {
  const int64_t rows = 7, cols = 96;
  const std::vector<float> x = activation_rows(rows, cols, 11);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * cols;
    std::vector<float> got(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
    nvfp4_round_trip_row(row, cols, got.data());
    nvfp4_dequantize(nvfp4_quantize(row, 1, cols).value(), want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "NVFP4 row " << r;
    mxfp4_round_trip_row(row, cols, got.data());
    mxfp4_dequantize(mxfp4_quantize(row, 1, cols).value(), want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "MXFP4 row " << r;
  }
}

TEST(Fp4Activations, NonFiniteElementsPassThroughAndStayOutOfTheScales) {
  std::vector<float> x(32, 0.0f);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i + 1);
  std::vector<float> finite_only = x;
  x[3] = kInf;
  x[20] = kNaN;
  finite_only[3] = finite_only[20] = 0.0f;
  for (auto round_trip : {&nvfp4_round_trip_row, &mxfp4_round_trip_row}) {
    std::vector<float> got(32), want(32);
    round_trip(x.data(), 32, got.data());
    round_trip(finite_only.data(), 32, want.data());
    EXPECT_EQ(got[3], kInf);
    EXPECT_TRUE(std::isnan(got[20]));
    for (int i = 0; i < 32; ++i) {
      if (i != 3 && i != 20) {
        EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << i;
      }
    }
  }
}

// The tiled layout written as the 5-D permutation it is (spec §1c): scales viewed as
// [rows / 128, 4, 32, tiles across, 4] and stored in the order (0, 3, 2, 1, 4).
std::vector<uint8_t> tiles_by_permutation(const std::vector<uint8_t>& scales, int64_t rows, int64_t scale_cols) {
  const int64_t row_tiles = (rows + 127) / 128, col_tiles = (scale_cols + 3) / 4;
  std::vector<uint8_t> out;
  for (int64_t row_tile = 0; row_tile < row_tiles; ++row_tile) {
    for (int64_t col_tile = 0; col_tile < col_tiles; ++col_tile) {
      for (int64_t r32 = 0; r32 < 32; ++r32) {
        for (int64_t r4 = 0; r4 < 4; ++r4) {
          for (int64_t c4 = 0; c4 < 4; ++c4) {
            const int64_t row = row_tile * 128 + r4 * 32 + r32, col = col_tile * 4 + c4;
            out.push_back(row < rows && col < scale_cols ? scales[static_cast<size_t>(row * scale_cols + col)] : 0);
          }
        }
      }
    }
  }
  return out;
}

TEST(BlockScaleTiles, AreThePermutationOfSpec1cWithZeroPadding) {
  for (const auto& [rows, scale_cols] : {std::pair<int64_t, int64_t>{128, 4}, {130, 5}, {1, 1}, {300, 12}, {7, 9}}) {
    std::vector<uint8_t> scales(static_cast<size_t>(rows * scale_cols));
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(1 + i % 251);  // never 0
    const std::vector<uint8_t> tiled = tile_block_scales(scales.data(), rows, scale_cols);
    EXPECT_EQ(static_cast<int64_t>(tiled.size()), scale_tiles_bytes(rows, scale_cols));
    EXPECT_EQ(tiled, tiles_by_permutation(scales, rows, scale_cols)) << rows << " x " << scale_cols;
  }
  // A hand-checked entry: row 33, column 2 of a 128 x 4 matrix sits at 1 * 16 + 1 * 4 + 2.
  EXPECT_EQ(scale_tile_offset(33, 2, 4), 22);
  // The second tile across starts at 512, the second tile down after every tile across.
  EXPECT_EQ(scale_tile_offset(0, 4, 8), 512);
  EXPECT_EQ(scale_tile_offset(128, 0, 8), 1024);
}

}  // namespace
}  // namespace moert::quant
