// NEON kernels of core/cpu/dot.cpp (AArch64 builds only: see core/cpu/CMakeLists.txt). Call
// only when active_cpu_isa() is kNeon.
#pragma once

#include <cstdint>

#include "core/cpu/dot_lanes.h"

namespace moert::cpu::arm {

using dot_detail::WeightKind;

// out[r] = canonical dot(x row r, w) for r < rows (1..4); x row r at x + r * x_stride.
void dot_rows_neon(WeightKind kind, const float* x, int64_t x_stride, int rows, int64_t k, const void* w, float* out);

}  // namespace moert::cpu::arm
