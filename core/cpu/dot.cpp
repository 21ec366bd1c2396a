#include "core/cpu/dot.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/cpu/isa.h"
#if defined(MOERT_X86_KERNELS)
#include "core/cpu/x86/dot_x86.h"
#endif
#if defined(MOERT_ARM_KERNELS)
#include "core/cpu/arm/dot_neon.h"
#endif

namespace moert::cpu {
namespace {

using namespace dot_detail;  // kLanes, kMaxRows, reduce_lanes, WeightKind, scalar_weight

template <typename WeightAt>
void dot_rows_portable(const float* x, int64_t x_stride, int rows, int64_t k, WeightAt weight_at, float* out) {
  float lanes[kMaxRows][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float w = weight_at(i + l);
      for (int r = 0; r < rows; ++r) lanes[r][l] = std::fma(x[r * x_stride + i + l], w, lanes[r][l]);
    }
  }
  for (int l = 0; i < k; ++i, ++l) {
    const float w = weight_at(i);
    for (int r = 0; r < rows; ++r) lanes[r][l] = std::fma(x[r * x_stride + i], w, lanes[r][l]);
  }
  for (int r = 0; r < rows; ++r) out[r] = reduce_lanes(lanes[r]);
}

template <WeightKind kind>
void dot_rows_of_kind(const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (active_cpu_isa()) {
#if defined(MOERT_X86_KERNELS)
    case CpuIsa::kAvx512: return x86::dot_rows_avx512(kind, x, x_stride, rows, k, w, out);
    case CpuIsa::kAvx2: return x86::dot_rows_avx2(kind, x, x_stride, rows, k, w, out);
#else
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx2:  // never selected without the x86 kernels (core/cpu/isa.cpp)
#endif
#if defined(MOERT_ARM_KERNELS)
    case CpuIsa::kNeon: return arm::dot_rows_neon(kind, x, x_stride, rows, k, w, out);
#else
    case CpuIsa::kNeon:  // never selected without the AArch64 kernels
#endif
    case CpuIsa::kPortable:
      return dot_rows_portable(x, x_stride, rows, k, [&](int64_t i) { return scalar_weight<kind>(w, i); }, out);
  }
}

}  // namespace

void dot_rows(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out) {
  switch (kind) {
    case WeightKind::kF32: return dot_rows_of_kind<WeightKind::kF32>(x, x_stride, rows, k, w, out);
    case WeightKind::kBF16: return dot_rows_of_kind<WeightKind::kBF16>(x, x_stride, rows, k, w, out);
    case WeightKind::kF16: return dot_rows_of_kind<WeightKind::kF16>(x, x_stride, rows, k, w, out);
  }
}

DotTile dot_block_tile(int64_t num_rows) {
  switch (active_cpu_isa()) {
#if defined(MOERT_X86_KERNELS)
    case CpuIsa::kAvx512: return kAvx512Tile;
    case CpuIsa::kAvx2: return num_rows == 1 ? kAvx2SingleRowTile : kAvx2Tile;
#endif
    default: return kNoDotTile;
  }
}

void dot_block(DotTile tile, WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k,
               const void* const* w_rows, float* out) {
  MOERT_CHECK(tile != kNoDotTile && rows >= 1 && rows <= tile.rows,
              "dot_block: " << rows << " rows on a " << tile.rows << "x" << tile.cols << " tile");
#if defined(MOERT_X86_KERNELS)
  if (tile == kAvx512Tile) return x86::dot_block_avx512(kind, x, x_stride, rows, k, w_rows, out);
  return x86::dot_block_avx2(kind, x, x_stride, rows, tile.cols, k, w_rows, out);
#else
  (void)kind, (void)x, (void)x_stride, (void)k, (void)w_rows, (void)out;
#endif
}

float dot_f32(const float* a, const float* b, int64_t k) {
  float out;
  dot_rows(WeightKind::kF32, a, 0, 1, k, b, &out);
  return out;
}

void dot_f32_rows(const float* x, int64_t x_stride, int rows, const float* w, int64_t k, float* out) {
  for (int r = 0; r < rows; r += kMaxRows) {
    dot_rows(WeightKind::kF32, x + r * x_stride, x_stride, std::min(kMaxRows, rows - r), k, w, out + r);
  }
}

float dot_f32_reference(const float* a, const float* b, int64_t k) {
  float out;
  dot_rows_portable(a, 0, 1, k, [&](int64_t i) { return b[i]; }, &out);
  return out;
}

}  // namespace moert::cpu
