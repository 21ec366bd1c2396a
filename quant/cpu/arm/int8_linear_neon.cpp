#include "quant/cpu/arm/int8_linear_neon.h"

#include <arm_neon.h>

#include "core/cpu/prefetch.h"
#include "quant/cpu/int8_linear_tiles.h"

namespace moert::quant::arm {
namespace {

using namespace int8_detail;

// acc + per 32-bit lane the sum of the 4 adjacent byte products (exact). sdot is written as
// asm so that no function needs a dot-product target (the other variant must not get it).
template <bool kDotprod>
inline int32x4_t dot_bytes(int32x4_t acc, int8x16_t a, int8x16_t b) {
  if constexpr (kDotprod) {
    asm(".arch armv8.2-a+dotprod\n\tsdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
  } else {
    const int32x4_t low = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));  // pairs of bytes 0-7
    const int32x4_t high = vpaddlq_s16(vmull_high_s8(a, b));                      // pairs of bytes 8-15
    return vaddq_s32(acc, vpaddq_s32(low, high));
  }
}

// The group's 64 weight bytes (2 * e2m1, signed) in four registers, register q = group bytes
// 16q .. 16q + 15 = lanes 4q .. 4q + 3. From the 32 code bytes: kCpuChunk32 form low nibbles
// of both halves, then high nibbles; checkpoint order (byte i = elements 2i, 2i + 1) the
// nibbles zipped back into element order (the group's block order 0, 2, 1, 3).
inline void weight_bytes(const uint8_t* p, bool checkpoint_order, int8x16_t lut, int8x16_t (&out)[4]) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  const uint8x16_t v0 = vld1q_u8(p), v1 = vld1q_u8(p + 16);
  const uint8x16_t lo0 = vandq_u8(v0, low4), hi0 = vshrq_n_u8(v0, 4);
  const uint8x16_t lo1 = vandq_u8(v1, low4), hi1 = vshrq_n_u8(v1, 4);
  uint8x16_t codes[4];
  if (checkpoint_order) {
    codes[0] = vzip1q_u8(lo0, hi0);  // elements 0-15
    codes[1] = vzip1q_u8(lo1, hi1);  // 32-47
    codes[2] = vzip2q_u8(lo0, hi0);  // 16-31
    codes[3] = vzip2q_u8(lo1, hi1);  // 48-63
  } else {
    codes[0] = lo0;
    codes[1] = lo1;
    codes[2] = hi0;
    codes[3] = hi1;
  }
  for (int q = 0; q < 4; ++q) out[q] = vqtbl1q_s8(lut, codes[q]);
}

template <int rows, int cols, bool kDotprod>
void int8_tile_neon(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
  const int64_t groups = int8_groups(x.cols), full_groups = x.cols / kInt8Group;
  const int8x16_t lut = vld1q_s8(kDoubledE2m1);
  float32x4_t acc[rows][cols][4];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      for (int q = 0; q < 4; ++q) acc[r][c][q] = vdupq_n_f32(0.0f);
    }
  }
  uint8_t tail[32];
  for (int64_t g = 0; g < groups; ++g) {
    int8x16_t wq[cols][4];
    float scale[cols][4];  // per register q: the block scale of its lanes (blocks 0, 2, 1, 3)
    for (int c = 0; c < cols; ++c) {
      if (g % 2 == 0) cpu::prefetch_weight_stream(w[c].codes + g * 32, cols * (w[c].k / 2));
      const bool in_place = g < full_groups;
      if (!in_place) pack_group_codes(w[c], g, tail);
      weight_bytes(in_place ? w[c].codes + g * 32 : tail, in_place && w[c].order == Fp4CodeOrder::kCheckpoint, lut,
                   wq[c]);
      for (int q = 0; q < 4; ++q) scale[c][q] = block_scale(w[c], 4 * g + lane_block(4 * q));
    }
    for (int r = 0; r < rows; ++r) {
      const int64_t at = (t + r) * groups + g;
      const int8_t* xq = x.codes + at * kInt8Group;
      const float* xs = x.lane_scales + at * kInt8GroupLanes;
      for (int q = 0; q < 4; ++q) {
        const int8x16_t xv = vld1q_s8(xq + 16 * q);
        const float32x4_t xsv = vld1q_f32(xs + 4 * q);
        for (int c = 0; c < cols; ++c) {
          const int32x4_t sum = dot_bytes<kDotprod>(vdupq_n_s32(0), wq[c][q], xv);
          acc[r][c][q] = vfmaq_f32(acc[r][c][q], vcvtq_f32_s32(sum), vmulq_n_f32(xsv, scale[c][q]));
        }
      }
    }
  }
  float lanes[kInt8GroupLanes];
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      for (int q = 0; q < 4; ++q) vst1q_f32(lanes + 4 * q, acc[r][c][q]);
      out[r * cols + c] = reduce_lanes(lanes);
    }
  }
}

template <bool kDotprod>
struct NeonInt8Kernel {
  static constexpr int kRows = 2;
  static constexpr int kCols = 2;
  template <int rows, int cols>
  static void tile(const Int8RowsView& x, int64_t t, const Int8Col* w, float* out) {
    int8_tile_neon<rows, cols, kDotprod>(x, t, w, out);
  }
};

}  // namespace

void int8_linear_rows_neon_dotprod(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                                   int64_t begin, int64_t end) {
  int8_forward_rows<NeonInt8Kernel<true>>(x, w, bias, y, begin, end);
}

void int8_linear_rows_neon(const Int8RowsView& x, const QuantizedWeightView& w, const float* bias, float* y,
                           int64_t begin, int64_t end) {
  int8_forward_rows<NeonInt8Kernel<false>>(x, w, bias, y, begin, end);
}

}  // namespace moert::quant::arm
