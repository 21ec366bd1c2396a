// Internal to quant/cpu/bf16_linear.cpp and its x86/ tiles: the pieces of the definition
// (quant/cpu/bf16_linear.h) every path shares, and the row driver it runs its tiles under.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/cpu/dot_lanes.h"
#include "quant/cpu/bf16_linear.h"
#include "quant/cpu/quantized_linear_tiles.h"
#include "quant/cpu/row_driver.h"
#include "quant/formats/minifloat.h"

namespace moert::quant::bf16_detail {

using qlinear_detail::kFp8ScaleCols;
using qlinear_detail::RowRef;

constexpr int64_t kGroupLanes = kBf16Group / 2;  // float lanes per group: two products each
static_assert(kGroupLanes == cpu::dot_detail::kLanes);
static_assert(kFp8ScaleCols % kBf16Group == 0);
using cpu::dot_detail::reduce_lanes;

inline float bf16_value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof(f));
  return f;
}

// w_i of the definition: e4m3 * 2^8 (exact).
inline float weight_value(uint8_t code) { return e4m3_decode(code) * 256.0f; }

// s_b * 2^-8 of 128-column block b of row r.
inline float block_factor(const RowRef& r, int64_t b) { return r.fp8_scales[b * r.fp8_scale_stride] * 0x1p-8f; }

// Kernel: kRows, kCols, optionally kWideCols (row_driver.h) and tile<rows, cols>(x, t, w, out):
// out[r * cols + c] = the lane tree of x row t + r against weight row w[c] (bias not added).
template <typename Kernel, WeightFormat f>
void bf16_forward_rows(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                       int64_t begin, int64_t end) {
  drive_rows<Kernel::kRows, Kernel::kCols, wide_cols<Kernel>()>(
      x.rows, w.rows, begin, end, bias, y, qlinear_detail::shared_row_ref<f>(w),
      [&](RowRef& r, int64_t n) { qlinear_detail::point_at<f>(r, w, n); },
      [&](int rows, int64_t t, const RowRef* refs, float* dots, auto cols) {
        with_driven_tile_rows<Kernel::kRows, Kernel::kCols, decltype(cols)::value>(rows, [&](auto r) {
          Kernel::template tile<decltype(r)::value, decltype(cols)::value>(x, t, refs, dots);
        });
      });
}

// A dense BF16 weight row for the driver: re-pointed per output feature.
struct DenseRowRef {
  const uint16_t* data = nullptr;  // the row's K weights
};

// Kernel: kRows, kDenseCols and dense_tile<rows, cols>(x, t, w, out) as above, over dense rows.
template <typename Kernel>
void bf16_dense_forward(const Bf16RowsView& x, const uint16_t* w, int64_t n, const float* bias, float* y,
                        int64_t begin, int64_t end) {
  const int64_t k = x.cols;
  drive_rows<Kernel::kRows, Kernel::kDenseCols>(
      x.rows, n, begin, end, bias, y, DenseRowRef{w}, [&](DenseRowRef& r, int64_t row) { r.data = w + row * k; },
      [&](int rows, int64_t t, const DenseRowRef* refs, float* dots, auto cols) {
        with_tile_rows<Kernel::kRows>(rows, [&](auto r) {
          Kernel::template dense_tile<decltype(r)::value, decltype(cols)::value>(x, t, refs, dots);
        });
      });
}

template <typename Kernel>
void bf16_forward(const Bf16RowsView& x, const QuantizedWeightView& w, const float* bias, float* y, int64_t begin,
                  int64_t end) {
  if (w.format == WeightFormat::kFp8Block) {
    return bf16_forward_rows<Kernel, WeightFormat::kFp8Block>(x, w, bias, y, begin, end);
  }
  bf16_forward_rows<Kernel, WeightFormat::kFp8Tensor>(x, w, bias, y, begin, end);
}

}  // namespace moert::quant::bf16_detail
