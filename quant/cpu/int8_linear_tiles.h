// Internal to quant/cpu/int8_linear.cpp and its x86/ and arm/ tiles: one weight
// row of the int8 path, its block scales and codes in the group layout, and the row driver
// every instruction-set path runs its tiles under (the definition: quant/cpu/int8_linear.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cpu/dot_lanes.h"
#include "quant/cpu/int8_linear.h"
#include "quant/cpu/row_driver.h"
#include "quant/formats/fp4.h"
#include "quant/formats/minifloat.h"
#include "core/check.h"

namespace moert::quant::int8_detail {

// 2 * e2m1 of every code: the weight integers (sign bit 3).
constexpr int8_t kDoubledE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// The kernels' unsigned weights: 12 + 2 * e2m1 (in [0, 24]; lane_offsets takes the 12 back out).
constexpr uint8_t kOffsetDoubledE2m1[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
constexpr int kWeightOffset = 12;

// Group-local block (of 16 elements) of lane l: lane l covers group bytes 4l .. 4l + 3.
constexpr int lane_block(int l) { return static_cast<int>(int8_group_element(4 * l) / 16); }

// One weight row (output feature) of an NVFP4 / MXFP4 view.
struct Int8Col {
  const uint8_t* codes = nullptr;   // the row's K / 2 packed bytes
  const uint8_t* scales = nullptr;  // its block scale bytes (per 16: NVFP4, per 32: MXFP4)
  float global_scale = 1.0f;
  bool nvfp4 = true;
  int64_t k = 0;
  Fp4CodeOrder order = Fp4CodeOrder::kCheckpoint;
};

// What every row of `w` shares; point_int8_col() then sets one row's pointers
// (quant/cpu/row_driver.h).
inline Int8Col shared_int8_col(const QuantizedWeightView& w) {
  Int8Col c;
  c.nvfp4 = w.format == WeightFormat::kNvfp4;
  c.k = w.cols;
  c.global_scale = w.global_scale;
  c.order = w.code_order;
  return c;
}
inline void point_int8_col(Int8Col& c, const QuantizedWeightView& w, int64_t n) {
  c.codes = w.data + n * (w.cols / 2);
  c.scales = w.scales + n * (w.cols / (c.nvfp4 ? kNvfp4BlockSize : kMxfp4BlockSize));
}

// s_b of 16-element block b (the codec's block scale), 0 past K.
inline float block_scale(const Int8Col& c, int64_t b) {
  if (b * 16 >= c.k) return 0.0f;
  if (c.nvfp4) return e4m3_decode(c.scales[b]) * c.global_scale;
  return e8m0_decode(c.scales[b / 2]);
}

// The code of group g's byte j (0 for an absent element: e2m1 0).
inline uint8_t group_code(const Int8Col& c, int64_t g, int j) {
  const int64_t e = g * kInt8Group + int8_group_element(j);
  return e < c.k ? fp4_code_at(c.codes, e, c.k, c.order) : 0;
}

// Group g's codes as 32 bytes in the kCpuChunk32 form of a full group (byte j: group byte j in
// the low nibble, group byte 32 + j in the high one): how the SIMD paths read a last, partial
// group without touching memory past the row.
inline void pack_group_codes(const Int8Col& c, int64_t g, uint8_t* out32) {
  for (int j = 0; j < 32; ++j) out32[j] = static_cast<uint8_t>(group_code(c, g, j) | (group_code(c, g, 32 + j) << 4));
}

// x's 16-element block at `x` by the definition: its codes into codes[0, 16), and the lane
// scale 0.5 * d returned (NaN, codes 0, when an element is not finite).
inline float quantize_block_portable(const float* x, int8_t* codes) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < 16; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite) {
    std::fill_n(codes, 16, int8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < 16; ++i) codes[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
  return 0.5f * (amax / 127.0f);
}

// Every present 16-element block of x's rows in the group layout (the absent blocks of a last,
// partial group are skipped: the buffers come zeroed): block(x16, codes16, scales4, offsets4)
// fills the block's 16 codes and its 4 lanes' scales and offsets. Always inlined, so that an
// instruction-set path's block (a function of that target) can be inlined into its caller.
template <typename Block>
__attribute__((always_inline)) inline void for_each_x_block(const float* x, int64_t rows, int64_t cols, int8_t* codes,
                                                            float* lane_scales, int32_t* lane_offsets,
                                                            const Block& block) {
  const int64_t groups = int8_groups(cols);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = t * groups + g;
      for (int b = 0; b < 4 && g * kInt8Group + 16 * b < cols; ++b) {
        // The block's first group byte (the block order 0, 2, 1, 3 is its own inverse).
        const int64_t byte0 = int8_group_element(16 * b);
        block(x + t * cols + g * kInt8Group + 16 * b, codes + at * kInt8Group + byte0,
              lane_scales + at * kInt8GroupLanes + byte0 / 4, lane_offsets + at * kInt8GroupLanes + byte0 / 4);
      }
    }
  }
}

// Rows of x into an Int8RowsView's buffers (sized for rows x groups, zeroed), each block by
// quantize_block(x16, codes16) -> lane scale, the lane offsets from the codes it stored.
template <typename QuantizeBlock>
void quantize_rows(const float* x, int64_t rows, int64_t cols, int8_t* codes, float* lane_scales,
                   int32_t* lane_offsets, QuantizeBlock quantize_block) {
  for_each_x_block(x, rows, cols, codes, lane_scales, lane_offsets,
                   [&](const float* x16, int8_t* codes16, float* scales4, int32_t* offsets4) {
                     std::fill_n(scales4, 4, quantize_block(x16, codes16));
                     for (int l = 0; l < 4; ++l) {
                       const int8_t* q = codes16 + 4 * l;
                       offsets4[l] = -kWeightOffset * (q[0] + q[1] + q[2] + q[3]);
                     }
                   });
}

// The 16 lanes' tree is the canonical dot product's (core/cpu/dot_lanes.h).
static_assert(kInt8GroupLanes == cpu::dot_detail::kLanes);
using cpu::dot_detail::reduce_lanes;

// Kernel: kRows, kCols, optionally kWideCols (row_driver.h) and tile<rows, cols>(x, t, cols, out):
// out[r * cols + c] = the lane tree of x row t + r against weight row cols[c] (bias not added).
template <typename Kernel>
void int8_forward_rows(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y, int64_t begin,
                       int64_t end) {
  drive_rows<Kernel::kRows, Kernel::kCols, wide_cols<Kernel>()>(
      x.rows, w.rows, begin, end, bias, y, shared_int8_col(w),
      [&](Int8Col& c, int64_t n) { point_int8_col(c, w, n); },
      [&](int rows, int64_t t, const Int8Col* refs, float* dots, auto cols) {
        with_driven_tile_rows<Kernel::kRows, Kernel::kCols, decltype(cols)::value>(rows, [&](auto r) {
          Kernel::template tile<decltype(r)::value, decltype(cols)::value>(x, t, refs, dots);
        });
      });
}

}  // namespace moert::quant::int8_detail
