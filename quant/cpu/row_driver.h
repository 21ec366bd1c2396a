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

// with_tile_rows for a tile of `cols` weight rows under drive_rows<kRows, kCols, ...>: a wide
// tile (cols > kCols) always has one x row, so only that form is instantiated.
template <int kRows, int kCols, int cols, typename Tile>
void with_driven_tile_rows(int rows, Tile tile) {
  if constexpr (cols > kCols) {
    with_tile_rows<1>(rows, tile);
  } else {
    with_tile_rows<kRows>(rows, tile);
  }
}

// A kernel's column count for one-x-row tiles: Kernel::kWideCols where it declares one.
template <typename Kernel>
constexpr int wide_cols() {
  if constexpr (requires { Kernel::kWideCols; }) {
    return Kernel::kWideCols;
  } else {
    return Kernel::kCols;
  }
}

// Tiles of `cols` weight rows over output features [col, end) for x rows [t0, t_end); returns
// the first feature left for narrower tiles.
template <int cols, int kRows, typename Ref, typename PointAt, typename RunTile>
int64_t drive_column_tiles(int64_t t0, int64_t t_end, int64_t n, int64_t col, int64_t end, const float* bias, float* y,
                           Ref* refs, float* dots, PointAt& point_at, RunTile& run_tile) {
  for (; col + cols <= end; col += cols) {
    for (int c = 0; c < cols; ++c) point_at(refs[c], col + c);
    for (int64_t t = t0; t < t_end; t += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, t_end - t));
      run_tile(rows, t, refs, dots, std::integral_constant<int, cols>{});
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          y[(t + r) * n + col + c] = dots[r * cols + c] + (bias != nullptr ? bias[col + c] : 0.0f);
        }
      }
    }
  }
  return col;
}

// run_tile(rows, t, refs, dots, std::integral_constant<int, cols>): dots[r * cols + c] = the
// dot product of x row t + r with weight row refs[c], for r < rows, c < cols. With a single x
// row (batch-1 decode) the tiles are kWideCols wide first: each weight row is one chain of
// dependent FMAs per lane (the canonical order), so a one-row tile needs more columns than
// a multi-row one to keep the FMA units busy (docs/perf/cpu-roofline.md, "Sixteenth session").
// run_tile then sees rows == 1 whenever cols == kWideCols > kCols.
template <int kRows, int kCols, int kWideCols = kCols, typename Ref, typename PointAt, typename RunTile>
void drive_rows(int64_t num_rows, int64_t n, int64_t begin, int64_t end, const float* bias, float* y,
                const Ref& shared, PointAt point_at, RunTile run_tile) {
  static_assert(kWideCols >= kCols);
  float dots[std::max(kRows * kCols, kWideCols)];
  Ref refs[kWideCols];
  std::fill_n(refs, kWideCols, shared);
  for (int64_t t0 = 0; t0 < num_rows; t0 += cpu::dot_detail::kRowTile) {
    const int64_t t_end = std::min(num_rows, t0 + cpu::dot_detail::kRowTile);
    int64_t col = begin;
    if constexpr (kWideCols > kCols) {
      if (t_end - t0 == 1) {
        col = drive_column_tiles<kWideCols, kRows>(t0, t_end, n, col, end, bias, y, refs, dots, point_at, run_tile);
      }
    }
    if constexpr (kCols > 1) {
      col = drive_column_tiles<kCols, kRows>(t0, t_end, n, col, end, bias, y, refs, dots, point_at, run_tile);
    }
    drive_column_tiles<1, kRows>(t0, t_end, n, col, end, bias, y, refs, dots, point_at, run_tile);
  }
}

}  // namespace moert::quant
