// Internal to quant/cpu/quantized_linear.cpp and quant/cpu/x86/quantized_linear_x86.cpp:
// the canonical lanes, the codecs' scalar values per weight row, and the row driver that
// every instruction-set path runs its tiles under.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/cpu/dot_lanes.h"
#include "core/cpu/prefetch.h"
#include "quant/cpu/quantized_linear.h"
#include "quant/cpu/row_driver.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "quant/formats/minifloat.h"
#include "core/check.h"

namespace moert::quant::qlinear_detail {

// ---- The canonical order (see the header) ---------------------------------------------------
// A SIMD path may keep canonical lane perm[j] in register lane j (any fixed bijection: each
// lane still sees its elements in the same order); it stores its registers to `reg` and
// finish() maps them back before the tail and the tree.
// The 16 lanes and their tree are the canonical dot product's (core/cpu/dot_lanes.h).
using cpu::dot_detail::kLanes;
using cpu::dot_detail::kRowTile;
using cpu::dot_detail::reduce_lanes;

// Tail elements [i_tail, k) of one x row, then the tree. weight_at(i) is the codec's value.
template <typename WeightAt>
float finish(const float* reg, const int* perm, const float* x_row, int64_t i_tail, int64_t k, WeightAt weight_at) {
  float lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[perm[j]] = reg[j];
  for (int64_t i = i_tail, l = 0; i < k; ++i, ++l) lanes[l] = std::fma(x_row[i], weight_at(i), lanes[l]);
  return reduce_lanes(lanes);
}

constexpr int kIdentity[kLanes] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// ---- One weight row and the codec's value of its element i ------------------------------------
struct RowRef {
  const uint8_t* data = nullptr;        // fp4: K/2 packed bytes; fp8: K E4M3 bytes
  const uint8_t* scales = nullptr;      // fp4: the row's block scale bytes
  const float* fp8_scales = nullptr;    // fp8: scale of 128-column block kb at fp8_scales[kb * stride]
  int64_t fp8_scale_stride = 0;         // 1 (block) or 0 (tensor)
  float global_scale = 1.0f;            // nvfp4
  int64_t k = 0;                        // fp4: elements per row
  Fp4CodeOrder code_order = Fp4CodeOrder::kCheckpoint;  // fp4
  bool fp8_codes_finite = false;        // fp8: QuantizedWeightView::fp8_codes_finite
};

constexpr int64_t kFp8ScaleCols = kFp8BlockSize;  // 128 columns share an fp8 block scale

// What every row of `w` shares; point_at() then sets one row's pointers.
template <WeightFormat f>
RowRef shared_row_ref(const QuantizedWeightView& w) {
  RowRef r;
  r.k = w.cols;
  r.code_order = w.code_order;
  r.fp8_codes_finite = w.fp8_codes_finite;
  if constexpr (f == WeightFormat::kNvfp4) {
    r.global_scale = w.global_scale;
  } else if constexpr (f == WeightFormat::kFp8Block) {
    r.fp8_scale_stride = 1;
  } else if constexpr (f == WeightFormat::kFp8Tensor) {
    r.fp8_scales = &w.global_scale;
    r.fp8_scale_stride = 0;
  }
  return r;
}

// Points r (made by shared_row_ref for w) at weight row n (quant/cpu/row_driver.h).
template <WeightFormat f>
void point_at(RowRef& r, const QuantizedWeightView& w, int64_t n) {
  const int64_t k = w.cols;
  if constexpr (f == WeightFormat::kNvfp4) {
    r.data = w.data + n * (k / 2);
    r.scales = w.scales + n * (k / kNvfp4BlockSize);
  } else if constexpr (f == WeightFormat::kMxfp4) {
    r.data = w.data + n * (k / 2);
    r.scales = w.scales + n * (k / kMxfp4BlockSize);
  } else if constexpr (f == WeightFormat::kFp8Block) {
    r.data = w.data + n * k;
    r.fp8_scales = w.block_scale_inv + (n / kFp8BlockSize) * ((k + kFp8ScaleCols - 1) / kFp8ScaleCols);
  } else {
    r.data = w.data + n * k;
  }
}

// Exactly the expressions of nvfp4_dequantize / mxfp4_dequantize / fp8_*_dequantize.
template <WeightFormat f>
float weight_at(const RowRef& r, int64_t i) {
  if constexpr (f == WeightFormat::kNvfp4) {
    const float scale = e4m3_decode(r.scales[i / kNvfp4BlockSize]) * r.global_scale;
    return e2m1_decode(fp4_code_at(r.data, i, r.k, r.code_order)) * scale;
  } else if constexpr (f == WeightFormat::kMxfp4) {
    return e2m1_decode(fp4_code_at(r.data, i, r.k, r.code_order)) * e8m0_decode(r.scales[i / kMxfp4BlockSize]);
  } else {
    return e4m3_decode(r.data[i]) * r.fp8_scales[(i / kFp8ScaleCols) * r.fp8_scale_stride];
  }
}

inline uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// FP8 SIMD decode: the E4M3 bits moved into an F16 (sign to bit 15, exponent and mantissa to
// bits 13..7) are the E4M3 value times 2^-8 exactly, subnormals included, and the hardware
// F16 -> F32 conversion is exact. The 2^8 goes into the scale: h * (256 * s) is the exact
// product E4M3 * s rounded once, i.e. the codec's value, as long as 256 * s does not overflow
// (fp8_scales_foldable). The NaN codes (S.1111.111) become an F16 NaN.
constexpr float kFp8FoldLimit = 0x1p100f;
// A scale the SIMD decode may multiply by 256: one that is not finite passes through as the
// portable path would; a finite one must stay below kFp8FoldLimit.
inline bool scale_foldable(float s) { return !(std::isfinite(s) && std::fabs(s) > kFp8FoldLimit); }

// The checks of every rows call on a quantized weight (the int8 and bf16 modes add their own):
// the weight is valid, x has its columns, [begin, end) lies within its features.
inline void check_rows_call(int64_t x_cols, const QuantizedWeightView& w, int64_t begin, int64_t end) {
  const Status status = validate_quantized_weight(w);
  MOERT_CHECK(status.is_ok(), "" << status.to_string());
  MOERT_CHECK(x_cols == w.cols, "x has " << x_cols << " columns, the weight " << w.cols);
  MOERT_CHECK(0 <= begin && begin <= end && end <= w.rows, "rows [" << begin << ", " << end << ") of " << w.rows);
}

// Prefetches a weight stream (packed codes or scale bytes) one tile ahead, once per cache
// line: `offset` is the byte the loop reads now, the tile `cols` rows of `row_bytes` of this
// stream (core/cpu/prefetch.h).
inline void prefetch_stream_at(const uint8_t* stream, int64_t offset, int cols, int64_t row_bytes) {
  if (offset % cpu::kCacheLineBytes == 0) cpu::prefetch_weight_stream(stream + offset, cols * row_bytes);
}

// ---- The row driver, shared by every path ------------------------------------------------------
// Kernel: kRows (x rows per tile, 2 or 4), kCols (weight rows per tile), optionally kWideCols
// (weight rows per one-x-row tile, row_driver.h) and tile<f, rows, cols>(x, k, w, out):
// out[r * cols + c] = dot(x row r, weight row w[c]).
template <typename Kernel, WeightFormat f, int cols>
void run_tile(int rows, const float* x, int64_t k, const RowRef* w, float* out) {
  static_assert(Kernel::kRows == 2 || Kernel::kRows == 4);
  with_driven_tile_rows<Kernel::kRows, Kernel::kCols, cols>(
      rows, [&](auto r) { Kernel::template tile<f, decltype(r)::value, cols>(x, k, w, out); });
}

// Output features [begin, end) of y = x . W^T (+ bias), on the calling thread.
template <typename Kernel, WeightFormat f>
void forward_rows(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias, float* y,
                  int64_t begin, int64_t end) {
  const int64_t k = w.cols;
  drive_rows<Kernel::kRows, Kernel::kCols, wide_cols<Kernel>()>(
      num_rows, w.rows, begin, end, bias, y, shared_row_ref<f>(w), [&](RowRef& r, int64_t n) { point_at<f>(r, w, n); },
      [&](int rows, int64_t t, const RowRef* refs, float* dots, auto cols) {
        run_tile<Kernel, f, decltype(cols)::value>(rows, x + t * k, k, refs, dots);
      });
}

template <typename Kernel>
void forward_kernel(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias, float* y,
                    int64_t begin, int64_t end) {
  switch (w.format) {
    case WeightFormat::kNvfp4: return forward_rows<Kernel, WeightFormat::kNvfp4>(x, num_rows, w, bias, y, begin, end);
    case WeightFormat::kMxfp4: return forward_rows<Kernel, WeightFormat::kMxfp4>(x, num_rows, w, bias, y, begin, end);
    case WeightFormat::kFp8Block:
      return forward_rows<Kernel, WeightFormat::kFp8Block>(x, num_rows, w, bias, y, begin, end);
    case WeightFormat::kFp8Tensor:
      return forward_rows<Kernel, WeightFormat::kFp8Tensor>(x, num_rows, w, bias, y, begin, end);
  }
}

}  // namespace moert::quant::qlinear_detail
