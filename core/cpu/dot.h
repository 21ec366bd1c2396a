// The CPU math every kernel shares: the canonical dot product (core/cpu/dot_lanes.h) over F32
// activations and an F32, BF16 or F16 row, on the instruction-set path chosen at run time
// (core/cpu/isa.h). The dense linear layers (quant/cpu/linear) and the attention kernels
// (attention/cpu) take their dot products from here, so they agree bit for bit.
//
// Invariant: a result depends only on the two vectors and k, never on the path (AVX-512,
// AVX2+FMA, portable), the number of rows computed together or the thread.
#pragma once

#include <cstdint>

#include "core/cpu/dot_lanes.h"

namespace moert::cpu {

using dot_detail::WeightKind;
constexpr int kMaxDotRows = dot_detail::kMaxRows;  // x rows sharing one pass over a weight row

// out[r] = dot(x row r, w) for r < rows (1..kMaxDotRows); x row r at x + r * x_stride; w holds
// k elements of `kind`.
void dot_rows(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out);

// A register tile of dot_block: up to `rows` x rows against `cols` weight rows in one pass.
struct DotTile {
  int rows = 0;
  int cols = 0;
  friend bool operator==(const DotTile&, const DotTile&) = default;
};
constexpr DotTile kNoDotTile{};
// 6 x 4 accumulators: 24 of the 32 registers (6 rows beat 4 by ~4% in 32-sequence decode).
constexpr DotTile kAvx512Tile{6, 4};
// AVX2's 16 registers: 4 x 3 accumulators of one register each, lanes 0-7 of every chunk in one
// pass over k and lanes 8-15 in a second (a tile holding both halves fits only 2 x 3, which
// converts twice as many weights per FMA), or for a single x row 1 x 4 with both halves (eight
// independent FMA chains instead of dot_rows' two: batch-1 BF16 +40%). docs/perf/cpu-roofline.md.
constexpr DotTile kAvx2Tile{4, 3};
constexpr DotTile kAvx2SingleRowTile{1, 4};
// The tile for a product with num_rows x rows on this CPU; kNoDotTile when there is none
// (portable, NEON): callers then use dot_rows.
DotTile dot_block_tile(int64_t num_rows);
// out[r * tile.cols + c] = dot(x row r, w_rows[c]) for r < rows (1..tile.rows), c < tile.cols,
// for tile = dot_block_tile(...) != kNoDotTile. Same results as dot_rows.
void dot_block(DotTile tile, WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k,
               const void* const* w_rows, float* out);

// F32 conveniences (the attention kernels' dot products).
float dot_f32(const float* a, const float* b, int64_t k);
// out[r] = dot_f32(x + r * x_stride, w, k) for r < rows (any count), sharing passes over w.
void dot_f32_rows(const float* x, int64_t x_stride, int rows, const float* w, int64_t k, float* out);
// The portable path of dot_f32, whatever the CPU (tests compare the two).
float dot_f32_reference(const float* a, const float* b, int64_t k);

}  // namespace moert::cpu
