// AVX-512 and AVX2 kernels of core/cpu/dot.cpp (x86-64 builds only: see
// core/cpu/CMakeLists.txt). Call a path only when active_cpu_isa() selects it.
#pragma once

#include <cstdint>

#include "core/cpu/dot.h"

namespace moert::cpu::x86 {

using dot_detail::WeightKind;

// out[r] = canonical dot(x row r, w) for r < rows (1..4); x row r at x + r * x_stride.
void dot_rows_avx512(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w,
                     float* out);
void dot_rows_avx2(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out);

// out[r * kAvx512Tile.cols + c] = canonical dot(x row r, w_rows[c]) for r < rows (1..6).
void dot_block_avx512(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k,
                      const void* const* w_rows, float* out);
// out[r * cols + c] likewise, for the AVX2 tiles: rows 1..kAvx2Tile.rows with cols = kAvx2Tile.cols, or
// rows 1 with cols = kAvx2SingleRowTile.cols.
void dot_block_avx2(WeightKind kind, const float* x, int64_t x_stride, int rows, int cols, int64_t k,
                    const void* const* w_rows, float* out);

}  // namespace moert::cpu::x86
