// FP8 E4M3 with 128x128 block scales (DeepSeek `weight_scale_inv`, spec §3b) and with a
// per-tensor scale: scales, codes, ragged edge tiles, non-finite input, round-trip MSE (§5b).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "quant/formats/fp8.h"
#include "quant/formats/minifloat.h"
#include "tests/quant/formats/sample_data.h"

namespace moert::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// `code` is a nearest finite E4M3 value to y, after saturation at 448, with y's sign.
void expect_nearest_e4m3(uint8_t code, float y) {
  const float yc = std::fmin(std::fabs(y), 448.0f);
  const float got = std::fabs(e4m3_decode(code));
  const uint8_t mag = code & 0x7F;
  if (mag > 0) {
    EXPECT_LE(std::fabs(got - yc), std::fabs(e4m3_decode(mag - 1) - yc)) << y;
  }
  if (mag < 0x7E) {
    EXPECT_LE(std::fabs(got - yc), std::fabs(e4m3_decode(mag + 1) - yc)) << y;
  }
  EXPECT_EQ((code & 0x80) != 0, std::signbit(y)) << y;
}

TEST(Fp8Block, RaggedTilesScalesAndCodes) {
  constexpr int64_t kRows = 300, kCols = 200;  // tiles: 3 x 2, the last row/column ragged
  std::vector<float> x = test::normal_samples(kRows * kCols, 3);
  // Give each tile its own magnitude so a wrong tile index shows.
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) x[r * kCols + c] *= std::ldexp(1.0f, static_cast<int>(r / 128 * 2 + c / 128) - 2);
  }
  auto q = fp8_block_quantize(x.data(), kRows, kCols);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  ASSERT_EQ(q->scale_inv.size(), 6u);
  ASSERT_EQ(q->data.size(), static_cast<size_t>(kRows * kCols));
  for (int64_t rb = 0; rb < 3; ++rb) {
    for (int64_t cb = 0; cb < 2; ++cb) {
      float amax = 0.0f;
      for (int64_t r = rb * 128; r < std::min<int64_t>(kRows, rb * 128 + 128); ++r) {
        for (int64_t c = cb * 128; c < std::min<int64_t>(kCols, cb * 128 + 128); ++c) {
          amax = std::fmax(amax, std::fabs(x[r * kCols + c]));
        }
      }
      EXPECT_EQ(q->scale_inv[rb * 2 + cb], amax / 448.0f) << rb << " " << cb;
    }
  }
  std::vector<float> y(x.size());
  fp8_block_dequantize(*q, y.data());
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const int64_t i = r * kCols + c;
      const float s = q->scale_inv[(r / 128) * 2 + c / 128];
      expect_nearest_e4m3(q->data[i], x[i] / s);
      ASSERT_EQ(y[i], e4m3_decode(q->data[i]) * s) << r << " " << c;  // DeepSeek weight_dequant
    }
  }
}

// Codes are the exact quotient x / scale rounded once: for every value of a tile, the code
// decodes to the E4M3 value nearest to x / scale computed in float64 (a float32 quotient can
// land on a tie and round the wrong way: 0.10107421875 / (0.26953125 / 448) = 168.0000070).
TEST(Fp8Block, CodesRoundTheExactQuotient) {
  std::vector<float> x = {0.26953125f, 0.10107421875f, -0.10107421875f, 0.050537109375f};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (int i = 0; i < 4000; ++i) x.push_back(normal(rng));
  const int64_t cols = static_cast<int64_t>(x.size());
  Fp8BlockTensor t = fp8_block_quantize(x.data(), 1, cols, 1, cols).value();
  const float scale = t.scale_inv[0];
  std::vector<float> grid;  // every finite E4M3 magnitude
  for (int code = 0; code < 0x7F; ++code) grid.push_back(e4m3_decode(static_cast<uint8_t>(code)));
  for (int64_t i = 0; i < cols; ++i) {
    const double exact = std::fabs(static_cast<double>(x[static_cast<size_t>(i)]) / scale);
    double best = 1e30;
    for (float g : grid) best = std::min(best, std::fabs(g - exact));
    const double got = std::fabs(static_cast<double>(e4m3_decode(t.data[static_cast<size_t>(i)])));
    ASSERT_EQ(std::fabs(got - exact), best) << i << ": " << x[static_cast<size_t>(i)] << " / " << scale;
  }
  EXPECT_EQ(e4m3_decode(t.data[1]), 176.0f);  // not the tie-to-even 160 of the float32 quotient 168
  EXPECT_EQ(e4m3_decode(t.data[2]), -176.0f);
  EXPECT_EQ(e4m3_decode(t.data[3]), 88.0f);
}

TEST(Fp8Block, TileMaxDecodesToAbout448TimesScale) {
  std::vector<float> x(130 * 5, 0.25f);
  for (int i = 128 * 5; i < 130 * 5; ++i) x[i] = 0.0f;
  x[129 * 5 + 4] = -3.0f;  // the only nonzero of the ragged tile row 1
  auto q = fp8_block_quantize(x.data(), 130, 5);
  ASSERT_TRUE(q.is_ok());
  ASSERT_EQ(q->scale_inv.size(), 2u);
  EXPECT_EQ(q->scale_inv[0], 0.25f / 448.0f);
  EXPECT_EQ(q->data[0], 0x7E);
  EXPECT_EQ(q->data[129 * 5 + 4], 0xFE);
  EXPECT_EQ(q->data[129 * 5], 0x00);  // zeros in the ragged tile
}

TEST(Fp8Block, ZeroTileStoresZeroScale) {
  std::vector<float> x(4 * 256, 0.0f);
  for (int r = 0; r < 4; ++r) x[r * 256 + 200] = 1.0f;  // tile (0, 1) only
  x[3] = -0.0f;
  auto q = fp8_block_quantize(x.data(), 4, 256);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->scale_inv[0], 0.0f);
  EXPECT_EQ(q->scale_inv[1], 1.0f / 448.0f);
  EXPECT_EQ(q->data[0], 0x00);
  EXPECT_EQ(q->data[3], 0x80);  // sign of zero kept
  std::vector<float> y(x.size(), kNaN);
  fp8_block_dequantize(*q, y.data());
  for (int64_t c = 0; c < 128; ++c) EXPECT_EQ(y[c], 0.0f);
  EXPECT_EQ(y[200], 1.0f);
}

TEST(Fp8Block, OneByOneTwentyEightActivationGroups) {
  std::vector<float> x = test::normal_samples(3 * 300, 5);
  auto q = fp8_block_quantize(x.data(), 3, 300, 1, 128);
  ASSERT_TRUE(q.is_ok());
  ASSERT_EQ(q->scale_inv.size(), 9u);  // [3, ceil(300 / 128)]
  for (int r = 0; r < 3; ++r) {
    float amax = 0.0f;
    for (int c = 256; c < 300; ++c) amax = std::fmax(amax, std::fabs(x[r * 300 + c]));
    EXPECT_EQ(q->scale_inv[r * 3 + 2], amax / 448.0f) << r;
  }
}

TEST(Fp8Block, NonFiniteValues) {
  std::vector<float> x(2 * 3, 0.5f);
  x[1] = kInf;
  x[2] = kNaN;
  x[4] = -kInf;
  auto q = fp8_block_quantize(x.data(), 2, 3);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->scale_inv[0], 0.5f / 448.0f);  // Inf and NaN left out of the amax
  EXPECT_EQ(q->data[1], 0x7E);
  EXPECT_EQ(q->data[2], kE4m3NaN);
  EXPECT_EQ(q->data[4], 0xFE);
  std::vector<float> y(6);
  fp8_block_dequantize(*q, y.data());
  EXPECT_NEAR(y[1], 0.5f, 1e-6f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_NEAR(y[4], -0.5f, 1e-6f);
}

TEST(Fp8Block, RejectsBadArgumentsAndValidates) {
  std::vector<float> x(16, 1.0f);
  EXPECT_FALSE(fp8_block_quantize(x.data(), -1, 4).is_ok());
  EXPECT_FALSE(fp8_block_quantize(x.data(), 4, 4, 0, 128).is_ok());
  EXPECT_FALSE(fp8_block_quantize(nullptr, 4, 4).is_ok());
  EXPECT_TRUE(fp8_block_quantize(nullptr, 0, 4).is_ok());
  auto q = fp8_block_quantize(x.data(), 4, 4);
  ASSERT_TRUE(q.is_ok());
  Fp8BlockTensor t = *q;
  EXPECT_TRUE(fp8_block_validate(t).is_ok());
  t.scale_inv.push_back(1.0f);
  EXPECT_FALSE(fp8_block_validate(t).is_ok());
  t = *q;
  t.data.pop_back();
  EXPECT_FALSE(fp8_block_validate(t).is_ok());
}

TEST(Fp8Tensor, ScaleCodesAndNonFinite) {
  const std::vector<float> x = {1.0f, kInf, kNaN, -2.0f, 0.0f, 1e-9f};
  auto q = fp8_tensor_quantize(x.data(), 2, 3);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->scale, 2.0f / 448.0f);
  EXPECT_EQ(q->data[0], e4m3_encode(1.0f / (2.0f / 448.0f)));  // ~224
  EXPECT_EQ(e4m3_decode(q->data[0]), 224.0f);
  EXPECT_EQ(q->data[1], 0x7E);
  EXPECT_EQ(q->data[2], kE4m3NaN);
  EXPECT_EQ(q->data[3], 0xFE);
  EXPECT_EQ(q->data[4], 0x00);
  EXPECT_EQ(q->data[5], 0x00);  // 1e-9 / 0.0045 ~ 2.2e-7 < 2^-10
  std::vector<float> y(6);
  fp8_tensor_dequantize(*q, y.data());
  EXPECT_NEAR(y[0], 1.0f, 1e-6f);
  EXPECT_NEAR(y[1], 2.0f, 1e-6f);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_NEAR(y[3], -2.0f, 1e-6f);
}

TEST(Fp8Tensor, AllZeroTensor) {
  const std::vector<float> x(8, 0.0f);
  auto q = fp8_tensor_quantize(x.data(), 1, 8);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->scale, 0.0f);
  std::vector<float> y(8, kNaN);
  fp8_tensor_dequantize(*q, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

double fp8_tensor_round_trip_mse(const std::vector<float>& x) {
  auto q = fp8_tensor_quantize(x.data(), 512, 512);
  EXPECT_TRUE(q.is_ok());
  std::vector<float> y(x.size());
  fp8_tensor_dequantize(*q, y.data());
  return test::relative_mse(x, y);
}

TEST(Fp8Tensor, RoundTripRelativeMseMatchesSimulation) {
  // §5b: FP8 E4M3 per-tensor 0.00070 for N(0,1) and Laplace(1); within 10%.
  const auto normal = test::normal_samples(512 * 512, 0);
  EXPECT_NEAR(fp8_tensor_round_trip_mse(normal), 0.00070, 0.00007);
  EXPECT_NEAR(fp8_tensor_round_trip_mse(test::laplace_samples(512 * 512, 0)), 0.00070, 0.00007);
  // 128x128 tiles adapt the scale per tile; E4M3's relative error barely depends on it.
  auto q = fp8_block_quantize(normal.data(), 512, 512);
  ASSERT_TRUE(q.is_ok());
  std::vector<float> y(normal.size());
  fp8_block_dequantize(*q, y.data());
  EXPECT_NEAR(test::relative_mse(normal, y), 0.00070, 0.00007);
}

}  // namespace
}  // namespace moert::quant
