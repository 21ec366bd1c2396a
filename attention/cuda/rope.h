// CUDA rotary position embedding: host launcher only. The cos / sin tables are computed on
// the host by attention::RotaryEmbedding::cos_sin (float64 angles, rounded once), so the
// device rotation gives the CPU's bits exactly (docs/rope.md).
#pragma once

#include <cstdint>

#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// Rotates channels [first_channel, first_channel + rotary_dim) of every head of heads
// [T, num_heads, head_dim] in place: pair j is (j, j + rotary_dim / 2) when `interleaved` is
// false (rotate-half), (2j, 2j + 1) when true; token t uses cos[r, j], sin[r, j] of table
// row r = table_rows[t] ([T], e.g. the positions into a table of every position), or r = t
// when table_rows is null. cos, sin: [rows, rotary_dim / 2]; all in device memory.
int rope(float* heads, int64_t num_tokens, int num_heads, int head_dim, int rotary_dim, int first_channel,
         bool interleaved, const float* cos, const float* sin, const int64_t* table_rows, CUstream_st* stream);

}  // namespace moert::MOERT_CUDA_NS
