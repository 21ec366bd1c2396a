// The FP4-activation kernels of quant/cuda/fp4_activations.h, run through the emulation,
// against their CPU twins in quant/formats/fp4.h, bit for bit: the rounded rows, the packed
// codes, the tiled block scales and the row scales a block-scaled GEMM reads, and the tiling
// of a weight's scales. The data spans row scales from 2^-18 to 2^18, zero and tiny blocks,
// infinities and NaN, and exact E2M1 midpoints (the ties-to-even cases).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quant/formats/fp4.h"
#include "quant/cuda/fp4_activations.h"

namespace moert {
namespace {

namespace kernels = moert::cuda_emulated;
using kernels::Fp4Activations;

std::vector<float> activation_rows(int64_t rows, int64_t cols, bool non_finite) {
  std::mt19937 rng(rows * 1000 + cols);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(r % 7) * 6 - 18);
    for (int64_t k = 0; k < cols; ++k) x[static_cast<size_t>(r * cols + k)] = normal(rng) * row_scale;
  }
  for (int64_t k = 0; k < 32; ++k) {
    x[static_cast<size_t>(k)] = 0.0f;               // row 0: a zero block
    x[static_cast<size_t>(cols + k)] *= 1e-30f;     // row 1: a tiny block (scale clamps at 2^-9)
    x[static_cast<size_t>(2 * cols + k)] *= 1e20f;  // row 2: a huge one
  }
  // Row 3: an MXFP4 block of amax 6 holding every E2M1 midpoint (0.25 .. 5) and its negative.
  const float midpoints[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  for (int k = 0; k < 32; ++k) x[static_cast<size_t>(3 * cols + k)] = k < 14 ? (k % 2 ? -1.0f : 1.0f) * midpoints[k / 2] : 6.0f;
  if (non_finite) {
    x[static_cast<size_t>(4 * cols + 5)] = std::numeric_limits<float>::infinity();
    x[static_cast<size_t>(4 * cols + 40)] = -std::numeric_limits<float>::infinity();
    x[static_cast<size_t>(5 * cols + 7)] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

std::vector<float> cpu_round_trip(Fp4Activations format, const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    if (format == Fp4Activations::kNvfp4) {
      quant::nvfp4_round_trip_row(x.data() + r * cols, cols, out.data() + r * cols);
    } else {
      quant::mxfp4_round_trip_row(x.data() + r * cols, cols, out.data() + r * cols);
    }
  }
  return out;
}

TEST(CudaFp4Activations, RoundedRowsAreTheCpusBits) {
  for (const Fp4Activations format : {Fp4Activations::kNvfp4, Fp4Activations::kMxfp4}) {
    const int64_t rows = 9, cols = 160;
    const std::vector<float> x = activation_rows(rows, cols, /*non_finite=*/true);
    const std::vector<float> want = cpu_round_trip(format, x, rows, cols);
    std::vector<float> got(x.size());
    ASSERT_EQ(kernels::round_fp4_activations(format, x.data(), rows, cols, got.data(), nullptr), 0);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
    std::vector<float> in_place = x;
    ASSERT_EQ(kernels::round_fp4_activations(format, in_place.data(), rows, cols, in_place.data(), nullptr), 0);
    EXPECT_EQ(0, std::memcmp(in_place.data(), want.data(), got.size() * sizeof(float)));
    int changed = 0;
    for (size_t i = 0; i < x.size(); ++i) changed += std::isfinite(x[i]) && got[i] != x[i];
    EXPECT_GT(changed, static_cast<int>(x.size()) / 2) << "the rounding must move most values";
  }
}

// What a block-scaled GEMM reads: the CPU quantizer's codes of each row, its scales tiled,
// the row's global scale (NVFP4) or 1 (MXFP4). 130 rows cross a 128-row tile; the scale
// columns (10 or 5) pad to a multiple of 4.
TEST(CudaFp4Activations, QuantizedRowsAreTheCpuQuantizersCodesAndTiledScales) {
  for (const Fp4Activations format : {Fp4Activations::kNvfp4, Fp4Activations::kMxfp4}) {
    const int64_t rows = 130, cols = 160, block = kernels::fp4_activation_block(format), scale_cols = cols / block;
    const std::vector<float> x = activation_rows(rows, cols, /*non_finite=*/false);
    std::vector<uint8_t> want_packed, want_scales;
    std::vector<float> want_row_scale;
    for (int64_t r = 0; r < rows; ++r) {
      if (format == Fp4Activations::kNvfp4) {
        const quant::Nvfp4Tensor t = quant::nvfp4_quantize(x.data() + r * cols, 1, cols).value();
        want_packed.insert(want_packed.end(), t.packed.begin(), t.packed.end());
        want_scales.insert(want_scales.end(), t.block_scales.begin(), t.block_scales.end());
        want_row_scale.push_back(t.global_scale);
      } else {
        const quant::Mxfp4Tensor t = quant::mxfp4_quantize(x.data() + r * cols, 1, cols).value();
        want_packed.insert(want_packed.end(), t.packed.begin(), t.packed.end());
        want_scales.insert(want_scales.end(), t.scales.begin(), t.scales.end());
        want_row_scale.push_back(1.0f);
      }
    }
    const std::vector<uint8_t> want_tiled = quant::tile_block_scales(want_scales.data(), rows, scale_cols);
    std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2)), tiled(want_tiled.size(), 0xAB);
    std::vector<float> row_scale(static_cast<size_t>(rows));
    ASSERT_EQ(kernels::quantize_fp4_activations(format, x.data(), rows, cols, packed.data(), tiled.data(),
                                                row_scale.data(), nullptr),
              0);
    EXPECT_EQ(packed, want_packed);
    EXPECT_EQ(tiled, want_tiled);  // the padding too: 0xAB must be gone
    EXPECT_EQ(row_scale, want_row_scale);
  }
}

TEST(CudaFp4Activations, WeightScalesTileAsOnTheCpuAndRowsScaleAndTakeTheBias) {
  const int64_t rows = 200, scale_cols = 7;
  std::vector<uint8_t> scales(static_cast<size_t>(rows * scale_cols));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(1 + i * 7 % 253);
  const std::vector<uint8_t> want = quant::tile_block_scales(scales.data(), rows, scale_cols);
  std::vector<uint8_t> tiled(want.size(), 0xCD);
  ASSERT_EQ(kernels::tile_block_scales(scales.data(), rows, scale_cols, tiled.data(), nullptr), 0);
  EXPECT_EQ(tiled, want);

  std::vector<float> y = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const std::vector<float> row_scale = {0.5f, -2.0f}, bias = {10.0f, 20.0f, 30.0f};
  ASSERT_EQ(kernels::scale_rows_add_bias(y.data(), row_scale.data(), nullptr, 2, 3, nullptr), 0);
  EXPECT_EQ(y, (std::vector<float>{0.5f, 1.0f, 1.5f, -8.0f, -10.0f, -12.0f}));
  ASSERT_EQ(kernels::scale_rows_add_bias(y.data(), nullptr, bias.data(), 2, 3, nullptr), 0);
  EXPECT_EQ(y, (std::vector<float>{10.5f, 21.0f, 31.5f, 2.0f, 10.0f, 18.0f}));
}

}  // namespace
}  // namespace moert
