#include "core/cpu/arm/dot_neon.h"

#include <arm_neon.h>

#include <cmath>

#include "core/cpu/prefetch.h"

namespace moert::cpu::arm {
namespace {

using namespace dot_detail;

// The 16 canonical lanes in four 4-float registers: lane l in register l / 4, element l % 4.
template <WeightKind kind>
inline void load16(const void* w, int64_t i, float32x4_t (&out)[4]) {
  if constexpr (kind == WeightKind::kF32) {
    const float* p = static_cast<const float*>(w) + i;
    for (int q = 0; q < 4; ++q) out[q] = vld1q_f32(p + 4 * q);
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(w) + i;
    for (int h = 0; h < 2; ++h) {
      const uint16x8_t raw = vld1q_u16(p + 8 * h);
      if constexpr (kind == WeightKind::kBF16) {  // BF16 is the top half of an F32: shift it there
        out[2 * h] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(raw), 16));
        out[2 * h + 1] = vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(raw), 16));
      } else {  // F16 -> F32 is exact
        const float16x8_t half = vreinterpretq_f16_u16(raw);
        out[2 * h] = vcvt_f32_f16(vget_low_f16(half));
        out[2 * h + 1] = vcvt_high_f32_f16(half);
      }
    }
  }
}

template <WeightKind kind>
constexpr int64_t kWeightBytes = kind == WeightKind::kF32 ? 4 : 2;

template <WeightKind kind, int rows>
void dot_rows_neon(const float* x, int64_t x_stride, int64_t k, const void* w, float* out) {
  float32x4_t acc[rows][4];
  for (int r = 0; r < rows; ++r) {
    for (int q = 0; q < 4; ++q) acc[r][q] = vdupq_n_f32(0.0f);
  }
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    if ((i * kWeightBytes<kind>) % kCacheLineBytes == 0) {
      prefetch_weight_stream(static_cast<const char*>(w) + i * kWeightBytes<kind>, k * kWeightBytes<kind>);  // the next row
    }
    float32x4_t wv[4];
    load16<kind>(w, i, wv);
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + r * x_stride + i;
      for (int q = 0; q < 4; ++q) acc[r][q] = vfmaq_f32(acc[r][q], vld1q_f32(xr + 4 * q), wv[q]);  // one rounding
    }
  }
  float lanes[kLanes];
  for (int r = 0; r < rows; ++r) {
    for (int q = 0; q < 4; ++q) vst1q_f32(lanes + 4 * q, acc[r][q]);
    out[r] = reduce_with_tail<kind>(lanes, x + r * x_stride, w, i, k);
  }
}

template <WeightKind kind>
void dot_rows_neon_kind(const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (rows) {
    case 1: return dot_rows_neon<kind, 1>(x, x_stride, k, w, out);
    case 2: return dot_rows_neon<kind, 2>(x, x_stride, k, w, out);
    case 3: return dot_rows_neon<kind, 3>(x, x_stride, k, w, out);
    default: return dot_rows_neon<kind, 4>(x, x_stride, k, w, out);
  }
}

}  // namespace

void dot_rows_neon(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (kind) {
    case WeightKind::kF32: return dot_rows_neon_kind<WeightKind::kF32>(x, x_stride, rows, k, w, out);
    case WeightKind::kBF16: return dot_rows_neon_kind<WeightKind::kBF16>(x, x_stride, rows, k, w, out);
    case WeightKind::kF16: return dot_rows_neon_kind<WeightKind::kF16>(x, x_stride, rows, k, w, out);
  }
}

}  // namespace moert::cpu::arm
