#include "quant/cpu/arm/quantized_linear_neon.h"

#include <arm_neon.h>

#include "quant/cpu/quantized_linear_tiles.h"

namespace moert::quant::arm {
namespace {

using namespace qlinear_detail;

// The 16 canonical lanes of a 16-element group in four 4-float registers, register q = lanes
// (= elements) 4q .. 4q + 3: no permutation anywhere.
using Group = float32x4_t[4];

// Eight F16 bit patterns (as uint16x8) -> registers out[0], out[1] (exact).
inline void f16_to_f32(uint16x8_t bits, float32x4_t* out) {
  const float16x8_t half = vreinterpretq_f16_u16(bits);
  out[0] = vcvt_f32_f16(vget_low_f16(half));
  out[1] = vcvt_high_f32_f16(half);
}

// FP4: every E2M1 value is an F16 whose low byte is 0, so one table lookup of the high bytes
// and a zip with zeros give the F16 patterns; F16 -> F32 is exact and the product with the
// block scale rounds once: the codec's e2m1 * scale. Checkpoint order: byte i holds elements
// 2i (low nibble) and 2i + 1.
inline void fp4_group(const uint8_t* p, float scale, Group& out) {
  static constexpr uint8_t kF16HighBytes[16] = {0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                                0x80, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6};
  const uint8x8_t packed = vld1_u8(p);
  const uint8x8_t lo = vand_u8(packed, vdup_n_u8(0x0F)), hi = vshr_n_u8(packed, 4);
  const uint8x16_t codes = vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi));  // elements 0-15
  const uint8x16_t high_bytes = vqtbl1q_u8(vld1q_u8(kF16HighBytes), codes);
  const uint8x16_t zero = vdupq_n_u8(0);
  f16_to_f32(vreinterpretq_u16_u8(vzip1q_u8(zero, high_bytes)), out);
  f16_to_f32(vreinterpretq_u16_u8(vzip2q_u8(zero, high_bytes)), out + 2);
  for (int q = 0; q < 4; ++q) out[q] = vmulq_n_f32(out[q], scale);
}

// FP8: the E4M3 byte moved into an F16 (sign to bit 15, exponent and mantissa to bits 13..7) is
// its value times 2^-8 exactly; times 256 * scale rounds once (kFp8FoldLimit). NaN codes
// (S.1111.111) get an F16 NaN unless the weight's codes are known finite.
template <bool kCodesFinite>
inline void fp8_group(const uint8_t* p, float scale_times_256, Group& out) {
  const int8x16_t bytes = vld1q_s8(reinterpret_cast<const int8_t*>(p));
  for (int h = 0; h < 2; ++h) {
    const int16x8_t wide = h == 0 ? vmovl_s8(vget_low_s8(bytes)) : vmovl_high_s8(bytes);
    uint16x8_t bits = vandq_u16(vreinterpretq_u16_s16(vshlq_n_s16(wide, 7)), vdupq_n_u16(0xBF80));
    if constexpr (!kCodesFinite) {
      const uint16x8_t nan = vceqq_u16(vandq_u16(bits, vdupq_n_u16(0x3F80)), vdupq_n_u16(0x3F80));
      bits = vorrq_u16(bits, vandq_u16(nan, vdupq_n_u16(0x7E00)));
    }
    f16_to_f32(bits, out + 2 * h);
  }
  for (int q = 0; q < 4; ++q) out[q] = vmulq_n_f32(out[q], scale_times_256);
}

// The group of 16 weights at element i of row w, as the codec's floats.
template <WeightFormat f, bool kCodesFinite>
inline void weight_group(const RowRef& w, int64_t i, Group& out) {
  if constexpr (f == WeightFormat::kNvfp4) {
    fp4_group(w.data + i / 2, e4m3_decode(w.scales[i / kNvfp4BlockSize]) * w.global_scale, out);
  } else if constexpr (f == WeightFormat::kMxfp4) {
    fp4_group(w.data + i / 2, e8m0_decode(w.scales[i / kMxfp4BlockSize]), out);
  } else {
    fp8_group<kCodesFinite>(w.data + i, w.fp8_scales[(i / kFp8ScaleCols) * w.fp8_scale_stride] * 256.0f, out);
  }
}

template <WeightFormat f, int rows, int cols, bool kCodesFinite>
void tile_neon(const float* x, int64_t x_stride, int64_t k, const RowRef* w, float* out) {
  float32x4_t acc[rows][cols][4];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      for (int q = 0; q < 4; ++q) acc[r][c][q] = vdupq_n_f32(0.0f);
    }
  }
  const int64_t k_full = k / kLanes * kLanes;
  for (int64_t i = 0; i < k_full; i += kLanes) {
    Group wv[cols];
    for (int c = 0; c < cols; ++c) {
      constexpr bool kFp4 = f == WeightFormat::kNvfp4 || f == WeightFormat::kMxfp4;
      prefetch_stream_at(w[c].data, kFp4 ? i / 2 : i, cols, kFp4 ? k / 2 : k);
      weight_group<f, kCodesFinite>(w[c], i, wv[c]);
    }
    for (int r = 0; r < rows; ++r) {
      for (int q = 0; q < 4; ++q) {
        const float32x4_t xv = vld1q_f32(x + r * x_stride + i + 4 * q);
        for (int c = 0; c < cols; ++c) acc[r][c][q] = vfmaq_f32(acc[r][c][q], xv, wv[c][q]);
      }
    }
  }
  float reg[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      for (int q = 0; q < 4; ++q) vst1q_f32(reg + 4 * q, acc[r][c][q]);
      out[r * cols + c] = finish(reg, kIdentity, x + r * x_stride, k_full, k,
                                 [&](int64_t j) { return weight_at<f>(w[c], j); });
    }
  }
}

struct NeonKernel {
  static constexpr int kRows = 2;
  static constexpr int kCols = 2;
  template <WeightFormat f, int rows, int cols>
  static void tile(const float* x, int64_t k, const RowRef* w, float* out) {
    if (w[0].fp8_codes_finite) return tile_neon<f, rows, cols, true>(x, k, k, w, out);
    tile_neon<f, rows, cols, false>(x, k, k, w, out);
  }
};

}  // namespace

void quantized_linear_rows_neon(const float* x, int64_t num_rows, const QuantizedWeightView& w, const float* bias,
                                float* y, int64_t begin, int64_t end) {
  forward_kernel<NeonKernel>(x, num_rows, w, bias, y, begin, end);
}

}  // namespace moert::quant::arm
