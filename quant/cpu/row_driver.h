// The row driver every quantized CPU path runs its tiles under (quant/cpu/quantized_linear_tiles.h
// for exact F32 activations, quant/cpu/int8_linear_tiles.h for int8 ones): output features
// [begin, end) of y [num_rows, n] = x . W^T (+ bias), x rows in tiles of kRowTile kept in cache
// while the weights stream past, kCols weight rows and up to kRows x rows per tile call, the
// last features one at a time.
//
// A weight row is a Ref the driver builds once (`shared`: what every row shares) and only
// re-points per row (`point_at(ref, row)`): copying whole refs per tile cost store-forwarding
// stalls worth ~25% of batch-1 FP4 decode (docs/perf/cpu-roofline.md, sixth session).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/check.h"
#include "core/cpu/dot_lanes.h"

namespace moert::quant {

// tile(std::integral_constant<int, rows>{}) for 1 <= rows <= kMaxRows: the kernels' tiles take
// their x row count as a template argument, the driver hands them a count known at run time.
template <int kMaxRows, typename Tile>
void with_tile_rows(int rows, Tile tile) {
  static_assert(kMaxRows >= 1 && kMaxRows <= 4);
  switch (rows) {
    case 1: return tile(std::integral_constant<int, 1>{});
    case 2:
      if constexpr (kMaxRows >= 2) return tile(std::integral_constant<int, 2>{});
      break;
    case 3:
      if constexpr (kMaxRows >= 3) return tile(std::integral_constant<int, 3>{});
      break;
    case 4:
      if constexpr (kMaxRows >= 4) return tile(std::integral_constant<int, 4>{});
      break;
    default: break;
  }
  MOERT_CHECK(false, "tile rows = " << rows << " (at most " << kMaxRows << ")");
}

// run_tile(rows, t, refs, dots, std::integral_constant<int, cols>): dots[r * cols + c] = the
// dot product of x row t + r with weight row refs[c], for r < rows, c < cols.
template <int kRows, int kCols, typename Ref, typename PointAt, typename RunTile>
void drive_rows(int64_t num_rows, int64_t n, int64_t begin, int64_t end, const float* bias, float* y,
                const Ref& shared, PointAt point_at, RunTile run_tile) {
  float dots[kRows * kCols];
  Ref refs[kCols];
  std::fill_n(refs, kCols, shared);
  for (int64_t t0 = 0; t0 < num_rows; t0 += cpu::dot_detail::kRowTile) {
    const int64_t t_end = std::min(num_rows, t0 + cpu::dot_detail::kRowTile);
    int64_t col = begin;
    for (; kCols > 1 && col + kCols <= end; col += kCols) {
      for (int c = 0; c < kCols; ++c) point_at(refs[c], col + c);
      for (int64_t t = t0; t < t_end; t += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, t_end - t));
        run_tile(rows, t, refs, dots, std::integral_constant<int, kCols>{});
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < kCols; ++c) {
            y[(t + r) * n + col + c] = dots[r * kCols + c] + (bias != nullptr ? bias[col + c] : 0.0f);
          }
        }
      }
    }
    for (; col < end; ++col) {
      point_at(refs[0], col);
      const float b = bias != nullptr ? bias[col] : 0.0f;
      for (int64_t t = t0; t < t_end; t += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, t_end - t));
        run_tile(rows, t, refs, dots, std::integral_constant<int, 1>{});
        for (int r = 0; r < rows; ++r) y[(t + r) * n + col] = dots[r] + b;
      }
    }
  }
}

}  // namespace moert::quant
