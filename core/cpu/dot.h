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
constexpr int kDotBlockCols = 4;                   // weight rows of one dot_block
constexpr int kDotBlockRows = 6;                   // x rows of one dot_block (at most)

// out[r] = dot(x row r, w) for r < rows (1..kMaxDotRows); x row r at x + r * x_stride; w holds
// k elements of `kind`.
void dot_rows(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out);
// True when dot_block has a wide path on this CPU (AVX-512); callers then prefer it.
bool dot_block_preferred();
// out[r * kDotBlockCols + c] = dot(x row r, w_rows[c]) for r < rows (1..kDotBlockRows). Same
// results as dot_rows; precondition: dot_block_preferred(). (6 x 4 accumulators: 24 of the 32
// registers; 6 rows beat 4 by ~4% in 32-sequence decode, docs/perf/cpu-roofline.md.)
void dot_block(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* const* w_rows,
               float* out);

// F32 conveniences (the attention kernels' dot products).
float dot_f32(const float* a, const float* b, int64_t k);
// out[r] = dot_f32(x + r * x_stride, w, k) for r < rows (any count), sharing passes over w.
void dot_f32_rows(const float* x, int64_t x_stride, int rows, const float* w, int64_t k, float* out);
// The portable path of dot_f32, whatever the CPU (tests compare the two).
float dot_f32_reference(const float* a, const float* b, int64_t k);

}  // namespace moert::cpu
